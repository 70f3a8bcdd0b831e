// PMIx values as servers hand them back (built here, no server needed), and the launcher versions'
// known-bad combinations.
#include <pmix.h>

#include <dlfcn.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "core/environment.hpp"
#include "core/shared_library.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"
#include "pmix/library.hpp"
#include "pmix/values.hpp"
#include "pmix/versions.hpp"
#include "support.hpp"

using jobkit::errc;
using jobkit::detail::launcher_versions;
using jobkit::detail::parse_release;
using jobkit::detail::pmix_bytes;
using jobkit::detail::pmix_count;
using jobkit::detail::pmix_integer;
using jobkit::detail::pmix_text;
using jobkit::detail::release;
using test_support::contains;

namespace {

pmix_value_t string_value(const char* text) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_STRING;
  v.data.string = const_cast<char*>(text);
  return v;
}

pmix_value_t byte_value(const char* bytes, std::size_t size) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = const_cast<char*>(bytes);
  v.data.bo.size = size;
  return v;
}

template <class T>
pmix_value_t number_value(pmix_data_type_t type, T number) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = type;
  std::memcpy(&v.data, &number, sizeof number);
  return v;
}

/// The text of the jobkit::error (pmix) that fn throws; fails when it throws none.
template <class F>
std::string refusal(F fn) {
  try {
    fn();
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::pmix);
    return e.what();
  }
  FAIL("no error");
  return {};
}

std::string as_string(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

TEST_CASE("pmix_text reads a string or a byte object, with or without its NUL") {
  CHECK(pmix_text(string_value("c1"), "PMIX_HOSTNAME") == "c1");
  CHECK(pmix_text(byte_value("0,1,2,3", 7), "PMIX_LOCAL_PEERS") == "0,1,2,3");
  CHECK(pmix_text(byte_value("0,1,2,3", 8), "PMIX_LOCAL_PEERS") == "0,1,2,3");  // the terminator too
  CHECK(pmix_text(byte_value("", 0), "PMIX_HOSTNAME").empty());
  CHECK(pmix_text(byte_value(nullptr, 0), "PMIX_HOSTNAME").empty());
  const auto inside = refusal([] { pmix_text(byte_value("c1\0c2", 5), "PMIX_HOSTNAME"); });
  CHECK(contains(inside, "PMIX_HOSTNAME"));
  CHECK(contains(inside, "NUL inside"));
  const auto number = refusal([] { pmix_text(number_value<std::uint32_t>(PMIX_UINT32, 3), "PMIX_LOCAL_PEERS"); });
  CHECK(contains(number, "PMIX_LOCAL_PEERS"));
  CHECK(contains(number, "not a string or byte object"));
}

TEST_CASE("pmix_bytes reads a byte object as it is, or a string's characters") {
  const char record[] = {'a', '\0', 'b', '\x7f'};
  CHECK(as_string(pmix_bytes(byte_value(record, sizeof record), "jobkit.ep")) == std::string(record, sizeof record));
  CHECK(as_string(pmix_bytes(string_value("endpoint"), "jobkit.ep")) == "endpoint");
  CHECK(pmix_bytes(byte_value(nullptr, 5), "jobkit.ep").empty());
  const auto message = refusal([] { pmix_bytes(number_value<int>(PMIX_INT, 1), "jobkit.nccl.0 of rank 3"); });
  CHECK(contains(message, "jobkit.nccl.0 of rank 3"));
}

TEST_CASE("pmix_count accepts every integer type and width") {
  CHECK(pmix_count(number_value<std::uint8_t>(PMIX_UINT8, 7), "k") == 7);
  CHECK(pmix_count(number_value<std::uint16_t>(PMIX_UINT16, 65535), "PMIX_LOCAL_RANK") == 65535);
  CHECK(pmix_count(number_value<std::uint32_t>(PMIX_UINT32, 4096), "PMIX_JOB_SIZE") == 4096);
  CHECK(pmix_count(number_value<std::uint64_t>(PMIX_UINT64, 12), "k") == 12);
  CHECK(pmix_count(number_value<std::int8_t>(PMIX_INT8, 5), "k") == 5);
  CHECK(pmix_count(number_value<std::int16_t>(PMIX_INT16, 300), "k") == 300);
  CHECK(pmix_count(number_value<std::int32_t>(PMIX_INT32, 70000), "k") == 70000);
  CHECK(pmix_count(number_value<std::int64_t>(PMIX_INT64, INT_MAX), "k") == INT_MAX);
  CHECK(pmix_count(number_value<int>(PMIX_INT, 2), "k") == 2);
  CHECK(pmix_count(number_value<unsigned>(PMIX_UINT, 3), "k") == 3);
  CHECK(pmix_count(number_value<std::size_t>(PMIX_SIZE, 9), "k") == 9);
  CHECK(pmix_count(number_value<pid_t>(PMIX_PID, 1234), "k") == 1234);
  CHECK(pmix_count(number_value<pmix_rank_t>(PMIX_PROC_RANK, 6), "k") == 6);
  CHECK(pmix_integer(number_value<std::int64_t>(PMIX_INT64, -5)) == -5);
  CHECK(!pmix_integer(string_value("5")));
}

TEST_CASE("pmix_count refuses negative, overflowing and non-integer values, naming the key") {
  for (const auto& value : {number_value<std::int8_t>(PMIX_INT8, -1), number_value<std::int32_t>(PMIX_INT32, -7),
                            number_value<std::int64_t>(PMIX_INT64, -1), number_value<int>(PMIX_INT, INT_MIN)}) {
    const auto message = refusal([&] { pmix_count(value, "PMIX_NODEID"); });
    CHECK(contains(message, "PMIX_NODEID"));
    CHECK(contains(message, "negative"));
  }
  for (const auto& value :
       {number_value<std::uint32_t>(PMIX_UINT32, 0x80000000u), number_value<std::uint64_t>(PMIX_UINT64, UINT64_MAX),
        number_value<std::int64_t>(PMIX_INT64, std::int64_t{INT_MAX} + 1),
        number_value<std::size_t>(PMIX_SIZE, SIZE_MAX),
        number_value<pmix_rank_t>(PMIX_PROC_RANK, PMIX_RANK_WILDCARD)}) {
    const auto message = refusal([&] { pmix_count(value, "PMIX_JOB_SIZE"); });
    CHECK(contains(message, "PMIX_JOB_SIZE"));
    CHECK(contains(message, "too large"));
  }
  for (const auto& value : {string_value("4"), byte_value("4", 1)}) {
    const auto message = refusal([&] { pmix_count(value, "PMIX_LOCAL_SIZE"); });
    CHECK(contains(message, "PMIX_LOCAL_SIZE"));
    CHECK(contains(message, "not an integer"));
  }
}

TEST_CASE("parse_release finds the first release number in a text") {
  CHECK(parse_release("OpenPMIx 4.2.2rc2, repo rev: v4.2.2") == release{4, 2, 2});
  CHECK(parse_release("slurm-wlm 22.05.8") == release{22, 5, 8});
  CHECK(parse_release("5.0.10") == release{5, 0, 10});
  CHECK(parse_release("24.11") == release{24, 11, -1});
  CHECK(!parse_release("slurm"));
  CHECK(!parse_release("v5"));
}

namespace {

std::vector<std::string> findings(const launcher_versions& v, bool warnings) {
  std::vector<std::string> texts;
  for (const auto& a : jobkit::detail::advise(v)) {
    if (a.warning == warnings) texts.push_back(a.text);
  }
  return texts;
}

launcher_versions versions(const char* client, const char* server, const char* slurm) {
  launcher_versions v;
  v.pmix_client = client;
  if (server) v.pmix_server = server;
  if (slurm) v.slurm = slurm;
  return v;
}

}  // namespace

TEST_CASE("advise warns on the Slurm and PMIx releases whose PMIx_Init hangs") {
  for (const char* slurm : {"24.11.5", "25.05.3", "25.11.0", "25.11.1", "25.11"}) {
    for (const char* server : {"5.0.8", "5.0.10", "6.0.0"}) {
      INFO(slurm << " with " << server);
      const auto warned = findings(versions("OpenPMIx 5.0.8", server, slurm), true);
      REQUIRE(warned.size() == 1);
      CHECK(contains(warned[0], "PMIx_Init hangs"));
      CHECK(contains(warned[0], "25.11.2"));
      CHECK(contains(warned[0], "3645"));
    }
  }
  CHECK(contains(findings(versions("5.0.8", "5.0.8", "25.11"), true)[0], "only the Slurm series is known"));
  for (const char* slurm : {"22.05.8", "24.05.4", "25.11.2", "26.05.1"}) {
    INFO(slurm);
    CHECK(findings(versions("OpenPMIx 5.0.9", "5.0.9", slurm), true).empty());
  }
  CHECK(findings(versions("OpenPMIx 5.0.7", "5.0.7", "24.11.5"), true).empty());
  CHECK(findings(versions("OpenPMIx 5.0.8", nullptr, "24.11.5"), true).empty());
}

TEST_CASE("advise warns on PMIx 5.0.0 with 5.0.1 unless PMIX_MCA_gds=hash") {
  CHECK(contains(findings(versions("OpenPMIx 5.0.0", "5.0.1", nullptr), true).at(0), "PMIX_MCA_gds=hash"));
  CHECK(findings(versions("OpenPMIx 5.0.1", "5.0.0", nullptr), true).size() == 1);
  CHECK(findings(versions("OpenPMIx 5.0.1", "5.0.2", nullptr), true).empty());
  auto with_hash = versions("OpenPMIx 5.0.0", "5.0.1", nullptr);
  with_hash.mca_gds = "hash";
  CHECK(findings(with_hash, true).empty());
  const auto notes = findings(with_hash, false);
  REQUIRE(notes.size() == 1);
  CHECK(contains(notes[0], "PMIX_MCA_gds=hash is in effect"));
}

TEST_CASE("advise notes a client and server of different major versions") {
  const auto notes = findings(versions("OpenPMIx 4.2.2rc2", "5.0.7", nullptr), false);
  REQUIRE(notes.size() == 1);
  CHECK(contains(notes[0], "PMIx client 4.2.2 with server 5.0.7"));
  CHECK(contains(notes[0], "wire-compatible"));
  CHECK(findings(versions("OpenPMIx 4.2.2", "4.2.8", nullptr), false).empty());
  CHECK(contains(findings(versions("OpenPMIx 4.2.2", "2.0.3", nullptr), true).at(0), "2.1.1"));
}

TEST_CASE("JOBKIT_PMIX_INIT_TIMEOUT follows the rule of every jobkit duration") {
  // pmix_init_timeout reads the process environment.
  ::unsetenv("JOBKIT_PMIX_INIT_TIMEOUT");
  CHECK(jobkit::detail::pmix_init_timeout() == std::chrono::seconds(60));
  ::setenv("JOBKIT_PMIX_INIT_TIMEOUT", "2.5", 1);
  CHECK(jobkit::detail::pmix_init_timeout() == std::chrono::milliseconds(2500));
  for (const char* bad : {"0", "-1", "soon", ""}) {
    ::setenv("JOBKIT_PMIX_INIT_TIMEOUT", bad, 1);
    try {
      jobkit::detail::pmix_init_timeout();
      FAIL("no error for '" << bad << "'");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == errc::invalid_environment);
      CHECK(contains(e.what(), "JOBKIT_PMIX_INIT_TIMEOUT"));
    }
  }
  ::unsetenv("JOBKIT_PMIX_INIT_TIMEOUT");
}

TEST_CASE("a library opened at run time: an absent one is named with every path tried, a lacking one with its calls",
          "[pmix]") {
  using jobkit::detail::library_request;
  const library_request absent{
      "libjobkit-absent.so.9", "f",          "/nonexistent/a:/nonexistent/b", RTLD_NOW | RTLD_LOCAL, errc::nccl,
      "<jobkit/nccl.hpp>",     "NCCL 2.28.9"};
  try {
    jobkit::detail::open_shared_library(absent);
    FAIL("an absent library was opened");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::nccl);
    CHECK(contains(e.what(), "<jobkit/nccl.hpp> needs libjobkit-absent.so.9 (NCCL 2.28.9, which jobkit was built"));
    CHECK(contains(e.what(), "tried:\n  libjobkit-absent.so.9: "));
    CHECK(contains(e.what(), "\n  /nonexistent/a/libjobkit-absent.so.9: "));
    CHECK(contains(e.what(), "\n  /nonexistent/b/libjobkit-absent.so.9: "));
    CHECK(contains(e.what(), "cannot open shared object file"));
    CHECK(contains(e.what(), "LD_LIBRARY_PATH"));
  }
  // A library that loads but is not the one expected: every missing call is listed.
  const auto math = jobkit::detail::open_shared_library(
      {"libm.so.6", "cos", "", RTLD_NOW | RTLD_LOCAL, errc::cuda, "<jobkit/nccl.hpp>", "the CUDA runtime 13000"});
  CHECK(contains(math.path, "libm.so.6"));
  std::vector<std::string> missing;
  CHECK(jobkit::detail::library_symbol(math, "cos", missing) != nullptr);
  CHECK(jobkit::detail::library_symbol(math, "cudaGetDeviceCount", missing) == nullptr);
  CHECK(jobkit::detail::library_symbol(math, "cudaSetDevice", missing) == nullptr);
  CHECK(missing == std::vector<std::string>{"cudaGetDeviceCount", "cudaSetDevice"});
  try {
    jobkit::detail::require_symbols(math, missing, errc::cuda, "the CUDA runtime 13000");
    FAIL("missing calls accepted");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::cuda);
    CHECK(contains(e.what(), "libm.so.6 ("));
    CHECK(contains(e.what(), "lacks cudaGetDeviceCount, cudaSetDevice: it is older than the CUDA runtime 13000"));
  }
}

TEST_CASE("pmix_api binds the libpmix already in the process; PMIx's macros, the same on every release", "[pmix]") {
  // This test links libpmix: the copy jobkit opens is that one.
  const auto& api = jobkit::detail::pmix_api();
  CHECK(api.PMIx_Get_version == &PMIx_Get_version);
  CHECK(api.PMIx_Init == &PMIx_Init);
  CHECK(jobkit::detail::pmix_client_version() == PMIx_Get_version());

  const pmix_proc_t proc = jobkit::detail::proc_of("slurm.pmix.42.0", 3);
  CHECK(std::string(proc.nspace) == "slurm.pmix.42.0");
  CHECK(proc.rank == 3);
  const std::string long_name(300, 'n');
  const pmix_proc_t cut = jobkit::detail::proc_of(long_name.c_str(), PMIX_RANK_WILDCARD);
  CHECK(std::string(cut.nspace) == long_name.substr(0, PMIX_MAX_NSLEN));
  CHECK(cut.rank == PMIX_RANK_WILDCARD);

  pmix_info_t info{};
  const int seconds = 7;
  jobkit::detail::load_info(info, PMIX_TIMEOUT, &seconds, PMIX_INT);
  CHECK(std::string(info.key) == PMIX_TIMEOUT);
  CHECK(info.value.type == PMIX_INT);
  CHECK(info.value.data.integer == 7);
  jobkit::detail::destruct_info(info);
  const std::string text = "endpoint";
  pmix_info_t string_info{};
  jobkit::detail::load_info(string_info, "jobkit.k", text.c_str(), PMIX_STRING);
  CHECK(std::string(string_info.value.data.string) == text);
  jobkit::detail::destruct_info(string_info);  // frees the copy (ASan: no leak)
  auto* value = static_cast<pmix_value_t*>(std::calloc(1, sizeof(pmix_value_t)));
  value->type = PMIX_STRING;
  value->data.string = strdup("held");
  jobkit::detail::release_value(value);  // the value and its string (ASan: no leak)
  jobkit::detail::release_value(nullptr);
}
