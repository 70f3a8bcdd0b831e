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
  CHECK(jobkit::detail::crc32c_portable(std::as_bytes(std::span(check))) == 0xE3069283u);
}

TEST_CASE("CRC-32C by the instruction equals the table code at every length, alignment and start") {
  INFO("the instruction used: " << jobkit::detail::crc32c_uses_instruction());
  std::vector<std::byte> data(4096 + 64);
  std::uint32_t x = 0x9E3779B9u;
  for (auto& b : data) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  const auto bytes = std::span<const std::byte>(data);
  for (std::size_t offset = 0; offset < 16; ++offset) {
    for (const std::size_t length : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4095, 4096}) {
      const auto piece = bytes.subspan(offset, length);
      for (const std::uint32_t start : {0u, 0xFFFFFFFFu, 0x12345678u}) {
        INFO("offset " << offset << ", length " << length << ", start " << start);
        REQUIRE(jobkit::detail::crc32c(piece, start) == jobkit::detail::crc32c_portable(piece, start));
      }
    }
  }
  // In pieces of every split, the whole's CRC.
  const auto whole = jobkit::detail::crc32c_portable(bytes.first(100));
  for (std::size_t split = 0; split <= 100; ++split) {
    INFO("split " << split);
    CHECK(jobkit::detail::crc32c(bytes.subspan(split, 100 - split), jobkit::detail::crc32c(bytes.first(split))) ==
          whole);
  }
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

// ---- The memory tier (src/checkpoints/memory_tier.hpp, docs/checkpoints-memory.md) ----

#include "checkpoints/memory_tier.hpp"
#include "core/environment.hpp"
#include "inprocess_groups.hpp"

namespace {

struct memory_scratch : scratch {
  fs::path memory = fs::temp_directory_path() / ("jobkit-ckpt-memory-test-" + std::to_string(::getpid()));
  memory_scratch() {
    fs::remove_all(memory);
    ::setenv("JOBKIT_CHECKPOINT_MEMORY", memory.c_str(), 1);
    ::unsetenv("JOBKIT_CHECKPOINT_MEMORY_LIMIT");
  }
  ~memory_scratch() {
    ::unsetenv("JOBKIT_CHECKPOINT_MEMORY");
    fs::remove_all(memory);
  }
};

}  // namespace

TEST_CASE("memory partners: another node, the next one, at the same position") {
  using jobkit::detail::memory_partners;
  CHECK(memory_partners({"a", "a", "b", "b"}) == std::vector<int>{2, 3, 0, 1});
  CHECK(memory_partners({"a", "a", "b", "b", "c", "c"}) == std::vector<int>{2, 3, 4, 5, 0, 1});
  CHECK(memory_partners({"a", "a"}) == std::vector<int>{-1, -1});
  CHECK(memory_partners({"a", "a", "a", "b"}) == std::vector<int>{3, 3, 3, 0});
  const std::vector<std::string> hosts{"a", "b", "c", "a", "b", "c", "c"};
  const auto partners = memory_partners(hosts);
  for (std::size_t r = 0; r < hosts.size(); ++r) CHECK(hosts[static_cast<std::size_t>(partners[r])] != hosts[r]);
}

TEST_CASE("copies run in rounds that share no rank") {
  using jobkit::detail::copy_rounds;
  const std::vector<std::pair<int, int>> ring{{0, 1}, {1, 2}, {2, 0}};
  CHECK(copy_rounds(ring) == std::vector<int>{0, 1, 2});
  const std::vector<std::pair<int, int>> pairs{{0, 2}, {1, 3}, {2, 0}, {3, 1}};
  CHECK(copy_rounds(pairs) == std::vector<int>{0, 0, 1, 1});
  CHECK(jobkit::detail::copies_of(2, pairs) == std::vector<std::size_t>{0, 2});
}

TEST_CASE("memory tier settings and names") {
  using jobkit::detail::map_environment;
  CHECK_FALSE(jobkit::detail::memory_directory_from({}, map_environment{}));
  CHECK(*jobkit::detail::memory_directory_from({}, map_environment{{"JOBKIT_CHECKPOINT_MEMORY", "/dev/shm/j"}}) ==
        "/dev/shm/j");
  CHECK_THROWS_WITH(jobkit::detail::memory_directory_from({}, map_environment{{"JOBKIT_CHECKPOINT_MEMORY", "shm"}}),
                    Catch::Contains("JOBKIT_CHECKPOINT_MEMORY='shm'"));
  CHECK(*jobkit::detail::memory_limit_from(map_environment{{"JOBKIT_CHECKPOINT_MEMORY_LIMIT", "4096"}}) == 4096);
  for (const char* bad : {"0", "-1", "4k", "1e9"}) {
    CHECK_THROWS_WITH(jobkit::detail::memory_limit_from(map_environment{{"JOBKIT_CHECKPOINT_MEMORY_LIMIT", bad}}),
                      Catch::Contains(std::string("JOBKIT_CHECKPOINT_MEMORY_LIMIT='") + bad + "'"));
  }
  const auto name = jobkit::detail::memory_job_directory_name("1234", "/shared/run");
  CHECK(name.starts_with("jobkit-ckpt-1234-"));
  CHECK(*jobkit::detail::job_of_memory_directory_name(name) == "1234");
  CHECK_FALSE(jobkit::detail::job_of_memory_directory_name("jobkit-turns-1.0-n0"));
  CHECK(name != jobkit::detail::memory_job_directory_name("1234", "/shared/other"));
  CHECK(jobkit::detail::rank_ranges({0, 1, 2, 3, 5, 7, 8}) == "0-3,5,7-8");
  CHECK(jobkit::detail::rank_ranges({}) == "none");
}

TEST_CASE("whether a job has ended, from squeue's answer") {
  using jobkit::detail::job_ended_from_squeue;
  CHECK(job_ended_from_squeue(0, "RUNNING\n", "") == false);
  CHECK(job_ended_from_squeue(0, "PENDING\n", "") == false);
  CHECK(job_ended_from_squeue(0, "COMPLETED\n", "") == true);
  CHECK(job_ended_from_squeue(0, "", "") == true);
  CHECK(job_ended_from_squeue(1, "", "slurm_load_jobs error: Invalid job id specified\n") == true);
  CHECK_FALSE(job_ended_from_squeue(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"));
  CHECK_FALSE(job_ended_from_squeue(127, "", ""));
}

TEST_CASE("the sweep removes the memory tiers of ended jobs only") {
  memory_scratch s;
  const auto now = std::chrono::system_clock::now();
  auto make = [&](const std::string& job, std::optional<std::chrono::system_clock::time_point> end) {
    const auto dir = s.memory / jobkit::detail::memory_job_directory_name(job, "/r");
    fs::create_directories(dir / "step-000000000001");
    std::ofstream(dir / ".job") << jobkit::detail::job_record(end);
    return dir;
  };
  const auto own = make("10", std::nullopt);
  const auto past = make("11", now - std::chrono::hours(1));
  const auto future = make("12", now + std::chrono::hours(1));
  const auto unknown = make("13", std::nullopt);
  const auto ended = make("14", std::nullopt);
  const auto running = make("15", now - std::chrono::hours(1));
  fs::create_directories(s.memory / "somebody-else");
  const auto removed = jobkit::detail::sweep_memory(s.memory, "10", ::getuid(), now, [](const std::string& job) {
    if (job == "14") return std::optional<bool>(true);
    if (job == "15") return std::optional<bool>(false);
    return std::optional<bool>();
  });
  CHECK(removed.size() == 2);
  CHECK(fs::exists(own));
  CHECK_FALSE(fs::exists(past));
  CHECK(fs::exists(future));
  CHECK(fs::exists(unknown));
  CHECK_FALSE(fs::exists(ended));
  CHECK(fs::exists(running));
  CHECK(fs::exists(s.memory / "somebody-else"));
}

TEST_CASE("a part copied over a group of two arrives exact, or is refused, named") {
  memory_scratch s;
  const auto from = s.memory / "from";
  fs::create_directories(from / "sub");
  std::string big(300'000, 'x');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  std::ofstream(from / "weights.bin") << big;
  std::ofstream(from / "sub" / "opt.bin") << "optimizer";
  std::vector<jobkit::detail::part_file> files;
  for (const auto* name : {"sub/opt.bin", "weights.bin"}) {
    const auto text = read_text(from / name);
    files.emplace_back(name, text.size(), jobkit::detail::crc32c(std::as_bytes(std::span(text.data(), text.size()))));
  }
  CHECK(jobkit::detail::check_part(from, files).empty());
  // The sender is the group's rank `sender` (the tier's pairs copy both ways over one group).
  auto copy = [&](const std::vector<jobkit::detail::part_file>& listed, std::uint64_t max_bytes, int sender = 0) {
    const auto into = s.memory / "into";
    const auto outcomes = test_support::on_ranks(test_support::inprocess_groups(2, {0, 1}), [&](jobkit::group& g) {
      using namespace std::chrono_literals;
      return g.rank() == sender ? jobkit::detail::send_part(g, from, listed, 10s, 65536)
                                : jobkit::detail::receive_part(g, into, max_bytes, 10s, nullptr, 65536);
    });
    const auto receiver = static_cast<std::size_t>(1 - sender);
    REQUIRE(outcomes[static_cast<std::size_t>(sender)].error.empty());
    REQUIRE(outcomes[receiver].error.empty());
    CHECK(outcomes[static_cast<std::size_t>(sender)].value->empty());
    return std::pair(*outcomes[receiver].value, into);
  };
  SECTION("whole") {
    const auto [problem, into] = copy(files, 1 << 20);
    CHECK(problem.empty());
    CHECK(read_text(into / "weights.bin") == big);
    CHECK(read_text(into / "sub" / "opt.bin") == "optimizer");
  }
  SECTION("whole, from the group's rank 1 to its rank 0") {
    const auto [problem, into] = copy(files, 1 << 20, 1);
    CHECK(problem.empty());
    CHECK(read_text(into / "weights.bin") == big);
  }
  SECTION("a flipped byte, from the group's rank 1") {
    big[77] ^= 1;
    std::ofstream(from / "weights.bin") << big;
    const auto [problem, into] = copy(files, 1 << 20, 1);
    CHECK_THAT(problem, Catch::Contains("'weights.bin' arrived with CRC-32C"));
  }
  SECTION("a flipped byte") {
    big[1234] ^= 1;
    std::ofstream(from / "weights.bin") << big;
    const auto [problem, into] = copy(files, 1 << 20);
    CHECK_THAT(problem, Catch::Contains("'weights.bin' arrived with CRC-32C"));
    CHECK_FALSE(fs::exists(into));
    CHECK_THAT(jobkit::detail::check_part(from, files), Catch::Contains("weights.bin"));
  }
  SECTION("more than the receiver allows") {
    const auto [problem, into] = copy(files, 1000);
    CHECK_THAT(problem, Catch::Contains("more than the 1000 bytes allowed"));
  }
  SECTION("a name outside the part") {
    const auto [problem, into] = copy({{"../escape", 1, 0}}, 1 << 20);
    CHECK_THAT(problem, Catch::Contains("is not inside the part"));
    CHECK_FALSE(fs::exists(s.memory / "escape"));
  }
}

TEST_CASE("the memory tier on one rank: saves, restores, falls back, refuses what does not fit") {
  memory_scratch s;
  {
    jobkit::checkpoints saved(s.root, {.keep = 2, .shared_every = 2});
    const auto memory = saved.memory_directory();
    REQUIRE(memory.parent_path() == s.memory);
    save(saved, 1, "one");  // to the root and the memory
    const auto second = saved.begin(2);
    CHECK(second.string().starts_with(memory.string()));  // memory only
    std::ofstream(second / "weights.bin") << "two";
    saved.commit();
    CHECK(entries(s.root) == std::vector<std::string>{"step-000000000001"});
    CHECK(fs::exists(memory / "step-000000000002" / "manifest.json"));
    CHECK_FALSE(fs::exists(memory / "step-000000000001"));  // memory_keep 1
  }
  SECTION("restored from memory") {
    jobkit::checkpoints saved(s.root, {.keep = 2, .shared_every = 2});
    REQUIRE(saved.latest() == 2);
    CHECK(saved.part(2).string().starts_with(saved.memory_directory().string()));
    CHECK(read_text(saved.part(2) / "weights.bin") == "two");
    saved.verify(2);
  }
  SECTION("a flipped byte in memory: the root's step") {
    jobkit::checkpoints saved(s.root, {.keep = 2, .shared_every = 2});
    std::ofstream(saved.memory_directory() / "step-000000000002" / "rank-0" / "weights.bin") << "twO";
    REQUIRE(saved.latest() == 1);
    CHECK(saved.part(1) == s.root / "step-000000000001" / "rank-0");
    CHECK(read_text(saved.part(1) / "weights.bin") == "one");
  }
  SECTION("a part larger than the limit: refused at the save, the root whole") {
    jobkit::checkpoints saved(s.root, {.keep = 2, .memory_limit = 2});
    std::ofstream(saved.begin(3) / "weights.bin") << "three";
    CHECK_THROWS_WITH(saved.commit(), Catch::Contains("does not fit in the memory tier") &&
                                          Catch::Contains("checkpoint_options::memory_limit=2"));
    CHECK_FALSE(fs::exists(s.root / "step-000000000003"));
    for (const auto& entry : fs::directory_iterator(s.root)) {  // nothing of it left half-written
      CHECK_FALSE(entry.path().filename().string().starts_with("step-000000000003"));
    }
    CHECK(read_text(s.root / "step-000000000001" / "rank-0" / "weights.bin") == "one");
    saved.verify(1);
  }
  SECTION("bad options name themselves") {
    CHECK_THROWS_WITH(jobkit::checkpoints(s.root, {.shared_every = 0}), Catch::Contains("shared_every=0"));
    CHECK_THROWS_WITH(jobkit::checkpoints(s.root, {.memory_keep = 3}), Catch::Contains("memory_keep=3"));
  }
}
