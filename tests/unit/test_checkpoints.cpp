// Checkpoint directories without a launcher (one rank): the layout, commit and latest, what is
// ignored and cleaned, the manifest, errors that leave the previous step the latest.
#include "jobkit/checkpoints.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "../catch.hpp"
#include "checkpoints/crc32c.hpp"
#include "checkpoints/manifest.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using test_support::contains;

namespace {

struct scratch {
  fs::path root = fs::temp_directory_path() / ("jobkit-ckpt-test-" + std::to_string(::getpid()));
  scratch() {
    fs::remove_all(root);
    ::unsetenv("FS_LOCAL_RANK");
  }
  ~scratch() { fs::remove_all(root); }
};

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void save(jobkit::checkpoints& saved, std::int64_t step, const std::string& content) {
  std::ofstream(saved.begin(step) / "weights.bin") << content;
  saved.commit();
}

std::vector<std::string> entries(const fs::path& root) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("CRC-32C matches the published check value") {
  const std::string check = "123456789";
  CHECK(jobkit::detail::crc32c(std::as_bytes(std::span(check))) == 0xE3069283u);
  // Fed in two pieces, the same.
  const auto bytes = std::as_bytes(std::span(check));
  CHECK(jobkit::detail::crc32c(bytes.subspan(4), jobkit::detail::crc32c(bytes.first(4))) == 0xE3069283u);
  CHECK(jobkit::detail::crc32c({}) == 0u);
}

TEST_CASE("step directory names are exact") {
  CHECK(jobkit::checkpoint_step_name(42) == "step-000000000042");
  CHECK(jobkit::parse_checkpoint_step_name("step-000000000042") == 42);
  for (const char* other : {"step-42", "step-00000000004x", "step-000000000042.partial.17.r0", "", "step-",
                            "xstep-00000000004", "step-0000000000042"}) {
    INFO(other);
    CHECK_FALSE(jobkit::parse_checkpoint_step_name(other));
  }
}

TEST_CASE("a committed step is the latest, with a manifest of every part") {
  scratch s;
  jobkit::checkpoints saved(s.root);
  CHECK_FALSE(saved.latest());
  CHECK(saved.is_committer());

  const auto part = saved.begin(7);
  CHECK(contains(part.string(), ".partial."));
  CHECK(saved.pending_step() == 7);
  std::ofstream(part / "weights.bin") << "123456789";
  fs::create_directories(part / "optimizer");
  std::ofstream(part / "optimizer" / "state") << "";
  CHECK_FALSE(saved.latest());  // not visible before commit

  saved.commit();
  CHECK_FALSE(saved.pending_step());
  CHECK(saved.latest() == 7);
  CHECK(read_text(saved.part(7) / "weights.bin") == "123456789");
  const auto manifest = read_text(s.root / "step-000000000007" / "manifest.json");
  CHECK(contains(manifest, R"("file":"rank-0/weights.bin","size":9,"crc32c":"e3069283")"));
  CHECK(contains(manifest, R"("file":"rank-0/optimizer/state","size":0,"crc32c":"00000000")"));
  CHECK(contains(manifest, R"("step":7)"));
  CHECK(contains(manifest, R"("world_size":1)"));
  CHECK(entries(s.root) == std::vector<std::string>{"step-000000000007"});
}

TEST_CASE("older steps beyond keep are removed after a commit") {
  scratch s;
  SECTION("keep 2") {
    jobkit::checkpoints saved(s.root, {.keep = 2});
    for (int step : {10, 20, 30}) save(saved, step, std::to_string(step));
    CHECK(entries(s.root) == std::vector<std::string>{"step-000000000020", "step-000000000030"});
    CHECK(saved.latest() == 30);
  }
  SECTION("keep 0 keeps all") {
    jobkit::checkpoints saved(s.root, {.keep = 0});
    for (int step : {1, 2, 3}) save(saved, step, "x");
    CHECK(entries(s.root).size() == 3);
  }
  SECTION("a step committed again replaces the old one") {
    jobkit::checkpoints saved(s.root);
    save(saved, 5, "old");
    save(saved, 5, "new");
    CHECK(read_text(saved.part(5) / "weights.bin") == "new");
    CHECK(entries(s.root) == std::vector<std::string>{"step-000000000005"});
  }
}

TEST_CASE("a failed commit leaves the previous step the latest") {
  scratch s;
  jobkit::checkpoints saved(s.root);
  save(saved, 1, "one");

  SECTION("commit without begin") {
    try {
      saved.commit();
      FAIL("no error");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == jobkit::errc::io);
      CHECK(contains(e.what(), "rank 0"));
      CHECK(contains(e.what(), "commit() without begin()"));
    }
  }
  SECTION("the part vanished") {
    fs::remove_all(saved.begin(2));
    CHECK_THROWS_WITH(saved.commit(), Catch::Contains("its part") && Catch::Contains("is missing"));
  }
  SECTION("a part holds a symbolic link") {
    fs::create_symlink("/etc/hostname", saved.begin(2) / "link");
    CHECK_THROWS_WITH(saved.commit(), Catch::Contains("is not a regular file or directory"));
  }
  CHECK(saved.latest() == 1);
  CHECK(read_text(saved.part(1) / "weights.bin") == "one");
}

TEST_CASE("unfinished saves are ignored; this job's are removed, other jobs' left alone") {
  scratch s;
  fs::create_directories(s.root / "step-000000000009.partial.nojob.r7" / "rank-0");  // an earlier attempt
  fs::create_directories(s.root / "step-000000000006.partial.nojob.r0" / "rank-0");  // this one's (the CLI)
  fs::create_directories(s.root / "step-000000000008.partial.999.r2" / "rank-0");    // another job's, running
  fs::create_directories(s.root / "step-000000000007");                              // no manifest: not ours
  fs::create_directories(s.root / "step-000000000003.removing.nojob.r0");            // an interrupted removal
  jobkit::checkpoints saved(s.root);
  CHECK_FALSE(saved.latest());
  CHECK(entries(s.root) == std::vector<std::string>{"step-000000000006.partial.nojob.r0", "step-000000000007",
                                                    "step-000000000008.partial.999.r2"});

  save(saved, 2, "two");  // after a commit, this attempt's other unfinished saves are stale
  CHECK(saved.latest() == 2);
  CHECK(entries(s.root) ==
        std::vector<std::string>{"step-000000000002", "step-000000000007", "step-000000000008.partial.999.r2"});
}

TEST_CASE("a step begun by one process is committed by another (the CLI)") {
  scratch s;
  {
    jobkit::checkpoints first(s.root);
    std::ofstream(first.begin(3) / "w") << "3";
  }
  jobkit::checkpoints second(s.root);
  second.commit(3);
  CHECK(second.latest() == 3);
}

TEST_CASE("a begin without commit is dropped by the next begin") {
  scratch s;
  jobkit::checkpoints saved(s.root);
  std::ofstream(saved.begin(4) / "a") << "abandoned";
  save(saved, 5, "five");
  CHECK(entries(s.root) == std::vector<std::string>{"step-000000000005"});
}

TEST_CASE("requeue after a stop: refused before the commit, and outside Slurm not requeued but recorded") {
  scratch s;
  ::unsetenv("SLURM_JOB_ID");  // never a real requeue from a test
  jobkit::checkpoints saved(s.root);
  const jobkit::stop_cause cause{jobkit::stop_reason::signal, SIGTERM, 0, {}};
  std::ofstream(saved.begin(3) / "weights.bin") << "w";
  try {
    saved.requeue(cause);
    FAIL("a requeue with a step begun and not committed was accepted");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_argument);
    CHECK(contains(e.what(), "rank 0 began step 3 and did not commit it"));
    CHECK(contains(e.what(), "commit before the requeue"));
  }
  saved.commit();
  CHECK_FALSE(saved.requeue(cause));
  std::vector<fs::path> records;
  for (const auto& e : fs::directory_iterator(s.root)) {
    if (e.path().filename().string().starts_with(".stopped-")) records.push_back(e.path());
  }
  REQUIRE(records.size() == 1);
  CHECK(records.front().filename().string().ends_with(".r0"));
  CHECK(read_text(records.front()) ==
        "SIGTERM on rank 0; not requeued: requeue: not in a Slurm job (SLURM_JOB_ID is not set)\n");
  CHECK(saved.latest() == 3);  // the record is not a step
}

TEST_CASE("verify reads every part back against the manifest") {
  scratch s;
  jobkit::checkpoints saved(s.root);
  save(saved, 1, "weights of step one");
  CHECK_NOTHROW(saved.verify(1));
  SECTION("a truncated file") {
    std::ofstream(saved.part(1) / "weights.bin") << "weights";
    CHECK_THROWS_WITH(saved.verify(1), Catch::Contains("is damaged") && Catch::Contains("rank 0") &&
                                           Catch::Contains("has 7 bytes") && Catch::Contains("manifest says 19"));
  }
  SECTION("a missing file") {
    fs::remove(saved.part(1) / "weights.bin");
    CHECK_THROWS_WITH(saved.verify(1), Catch::Contains("cannot open") && Catch::Contains("weights.bin"));
  }
  SECTION("a manifest that points outside the step") {
    std::ofstream(s.root / "step-000000000001" / "manifest.json")
        << R"(  {"rank":0,"host":"h","file":"../../etc/passwd","size":1,"crc32c":"00000000"})" << '\n';
    CHECK_THROWS_WITH(saved.verify(1), Catch::Contains("manifest line 1") && Catch::Contains("not inside the step"));
  }
  SECTION("a step that does not exist") { CHECK_THROWS_WITH(saved.verify(9), Catch::Contains("cannot read")); }
}

TEST_CASE("manifest lines parse back exactly and refuse anything else") {
  using jobkit::detail::manifest_part;
  const manifest_part part{3, "c\"2\n", "rank-3/a \\ b\x01.bin", 1234567890123ull, 0xdeadbeefu};
  const auto line = jobkit::detail::manifest_line(part);
  CHECK(jobkit::detail::parse_manifest_parts("{\"format\":1,\"parts\":[\n" + line + ",\n" + line + "\n]}\n") ==
        std::vector<manifest_part>{part, part});
  for (const char* bad : {
           R"(  {"rank":x,"host":"h","file":"f","size":1,"crc32c":"00000000"})",
           R"(  {"rank":1,"host":"h,"file":"f","size":1,"crc32c":"00000000"})",
           R"(  {"rank":1,"host":"h","file":"f","size":1,"crc32c":"0000000"})",
           R"(  {"rank":1,"host":"h","file":"f","size":1,"crc32c":"0000000g"})",
           R"(  {"rank":1,"host":"h","file":"f","size":-1,"crc32c":"00000000"})",
           R"(  {"rank":1,"host":"h","file":"f","size":1,"crc32c":"00000000"}x)",
           R"(  {"rank":1,"host":"h\u12","file":"f","size":1,"crc32c":"00000000"})",
           R"(  {"rank":1,"host":"h","file":"/etc/passwd","size":1,"crc32c":"00000000"})",
           R"(  {"rank":-1,"host":"h","file":"f","size":1,"crc32c":"00000000"})",
           R"(  {"rank":1,"host":"h","file":"","size":1,"crc32c":"00000000"})",
           R"(  {"rank":)",
       }) {
    INFO(bad);
    CHECK_THROWS_AS(jobkit::detail::parse_manifest_parts(bad), jobkit::error);
  }
}

TEST_CASE("bad arguments name themselves") {
  scratch s;
  CHECK_THROWS_WITH(jobkit::checkpoints(s.root, {.keep = -1}), Catch::Contains("keep=-1"));
  jobkit::checkpoints saved(s.root);
  CHECK_THROWS_WITH(saved.begin(-3), Catch::Contains("step=-3 is negative"));
  CHECK_THROWS_WITH(jobkit::checkpoints("/proc/jobkit-cannot-be-here"), Catch::Contains("/proc/jobkit-cannot-be-here"));
}
