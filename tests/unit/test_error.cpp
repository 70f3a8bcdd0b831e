#include "jobkit/error.hpp"

#include "../catch.hpp"

TEST_CASE("error carries its category, message and native status", "[error]") {
  const jobkit::error e(jobkit::errc::pmix, "PMIx_Fence failed", -24);
  CHECK(e.code() == jobkit::errc::pmix);
  CHECK(e.native_status() == -24);
  CHECK(std::string(e.what()) == "PMIx_Fence failed");
  CHECK(jobkit::to_string(e.code()) == "pmix");
}

TEST_CASE("timeout_error is a jobkit::error of category timeout", "[error]") {
  try {
    throw jobkit::timeout_error("barrier: ranks 3, 5 never arrived", -24);
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::timeout);
    CHECK(e.native_status() == -24);
    CHECK(std::string(e.what()).find("ranks 3, 5") != std::string::npos);
  }
}

TEST_CASE("every category has a name", "[error]") {
  using jobkit::errc;
  for (auto code : {errc::invalid_environment, errc::invalid_argument, errc::pmix, errc::timeout, errc::peer_failure,
                    errc::internal}) {
    CHECK(jobkit::to_string(code) != "unknown");
  }
}
