// The PMI-2 rendezvous over a stand-in libpmi2 (fake_pmi2.cpp, JOBKIT_TEST_FAKE_PMI2): loading,
// values across several keys, fence failures, and a fence that never returns becoming a
// timeout_error at its deadline. PMI-2 is initialised once per process, so the steps run in order
// in one test case.
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "jobkit/error.hpp"
#include "jobkit/runtime.hpp"
#include "pmi2/session.hpp"
#include "support.hpp"

using jobkit::errc;
using jobkit::detail::pmi2_session;
using test_support::contains;

namespace {

std::string construction_error() {
  try {
    pmi2_session session;
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::pmix);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the PMI-2 rendezvous loads libpmi2, carries bytes and bounds its fence", "[pmi2]") {
  const char* fake = std::getenv("JOBKIT_TEST_FAKE_PMI2");
  REQUIRE(fake != nullptr);

  // Asked for but not advertised: refused before any library is loaded.
  ::setenv("JOBKIT_IDENTITY", "pmi2", 1);
  try {
    jobkit::runtime rt;
    FAIL("JOBKIT_IDENTITY=pmi2 without PMI_FD passed");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::invalid_environment);
    CHECK(contains(e.what(), "no PMI-2 server is advertised (PMI_FD, PMI_RANK and PMI_SIZE"));
  }
  ::unsetenv("JOBKIT_IDENTITY");

  // No library: the message names what was tried and the variable that chooses it.
  ::setenv("JOBKIT_LIBPMI2", "/nonexistent/libpmi2.so.0", 1);
  const auto missing = construction_error();
  CHECK(contains(missing, "/nonexistent/libpmi2.so.0"));
  CHECK(contains(missing, "JOBKIT_LIBPMI2"));
  CHECK(contains(missing, "libpmi2-0"));
  // A library that is not libpmi2.
  ::setenv("JOBKIT_LIBPMI2", "libm.so.6", 1);
  CHECK(contains(construction_error(), "lacks PMI2_Init"));

  ::setenv("JOBKIT_LIBPMI2", fake, 1);
  ::setenv("FAKE_PMI2_MAPPING", "(vector,(0,1,1))", 1);
  pmi2_session session;
  const auto facts = session.query_facts();
  CHECK(facts.rank == 0);
  CHECK(facts.world_size == 1);
  CHECK(facts.job_id == "fake.0");
  CHECK(facts.process_mapping == std::optional<std::string>("(vector,(0,1,1))"));
  pmi2_session second;  // shares the process's one PMI-2 connection (PMI2_Init twice would fail)

  // A value of 1,234 bytes needs three keys of PMI-2's 1,023-character values.
  std::vector<std::byte> big(1234);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7);
  session.put("jobkit.test", big);
  session.put("jobkit.empty", {});
  CHECK_THROWS_AS(session.get(0, "jobkit.test", std::chrono::seconds(1)),
                  jobkit::error);  // not visible before the fence
  ::setenv("FAKE_PMI2_FENCE", "ok", 1);
  session.fence(std::chrono::seconds(5));
  CHECK(session.get(0, "jobkit.test", std::chrono::seconds(1)) == big);
  CHECK(second.get(0, "jobkit.empty", std::chrono::seconds(1)).empty());
  CHECK(session.get_all("jobkit.test", 1, std::chrono::seconds(1)) == std::vector<std::vector<std::byte>>{big});
  try {
    session.get(0, "jobkit.never", std::chrono::seconds(1));
    FAIL("a key never put was found");
  } catch (const jobkit::error& e) {
    CHECK(contains(e.what(), "PMI2_KVS_Get(jobkit.never@0) of rank 0 failed: PMI2_ERR_OTHER (14)"));
  }
  CHECK(session.ranks_without("jobkit.test", 1, std::chrono::seconds(1)).asked.empty());

  ::setenv("FAKE_PMI2_FENCE", "fail", 1);
  try {
    session.fence(std::chrono::seconds(5));
    FAIL("a failed fence passed");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::pmix);
    CHECK(contains(e.what(), "PMI2_KVS_Fence failed: PMI2_ERR_OTHER (14)"));
  }

  // A fence that never returns: a timeout_error at the deadline, and the connection is then
  // unusable (PMI-2 cannot cancel the fence), which every later call says.
  ::setenv("FAKE_PMI2_FENCE", "block", 1);
  int checks = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    session.fence(std::chrono::milliseconds(400), [&] { ++checks; });
    FAIL("a fence that never returns passed");
  } catch (const jobkit::timeout_error& e) {
    CHECK(contains(e.what(), "the PMI-2 fence over all ranks timed out after 400 ms"));
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= std::chrono::milliseconds(400));
  CHECK(waited < std::chrono::milliseconds(1500));
  CHECK(checks >= 4);  // while_waiting ran every 50 ms
  try {
    session.put("jobkit.after", big);
    FAIL("a put after an abandoned fence passed");
  } catch (const jobkit::error& e) {
    CHECK(contains(e.what(), "an earlier fence timed out after 400 ms and is still pending"));
  }
  CHECK_THROWS_AS(second.fence(std::chrono::seconds(1)), jobkit::error);
  // The process exits with the fence still blocked: PMI2_Finalize is skipped, nothing hangs.
}
