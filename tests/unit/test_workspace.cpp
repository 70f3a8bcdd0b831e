// The workspace and node_local_gather without a launcher: a single-rank workspace, workspaces
// and gathers of groups of threads (inprocess_groups.hpp: one thread per rank, all on this host, so gathers go
// through real POSIX shared memory), and the names that scope files and segments.
#include "jobkit/workspace.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "core/names.hpp"
#include "jobkit/runtime.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

/// A fresh directory under the system's temporary directory, removed with its contents.
class scratch_dir {
 public:
  scratch_dir() {
    std::string pattern = (fs::temp_directory_path() / "jobkit-test-workspace-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~scratch_dir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

/// A state that describes itself: the config names a sequence number and a size, the payload
/// is that many bytes derived from the sequence number.
jobkit::rank_state numbered_state(std::uint64_t sequence, std::size_t size) {
  jobkit::rank_state s{std::to_string(sequence) + " " + std::to_string(size), std::vector<std::byte>(size)};
  for (std::size_t i = 0; i < size; ++i) s.payload[i] = static_cast<std::byte>((sequence * 131 + i * 7) & 0xff);
  return s;
}

bool is_complete(const jobkit::rank_state& s) {
  const auto space = s.config.find(' ');
  if (space == std::string::npos) return false;
  try {
    return s == numbered_state(std::stoull(s.config.substr(0, space)), std::stoull(s.config.substr(space + 1)));
  } catch (const std::logic_error&) {  // not numbers: a damaged config
    return false;
  }
}

std::vector<std::string> on_each_rank(int size, const std::function<void(jobkit::group&)>& fn) {
  return test_support::errors_of(test_support::on_ranks(size, fn));
}

std::string segment_of(int world_rank) {
  return jobkit::detail::segment_name(jobkit::current_identity(), world_rank, static_cast<int>(::getpid()));
}

bool segment_exists(int world_rank) { return fs::exists("/dev/shm" + segment_of(world_rank)); }

}  // namespace

TEST_CASE("names hold the job, the step and the rank, and fit in a file name", "[workspace]") {
  jobkit::identity id;
  id.job_id = "4711";
  id.step_id = "3";
  id.world_size = 8;
  CHECK(jobkit::detail::job_step_tag(id, 99) == "4711.3");
  CHECK(jobkit::detail::segment_name(id, 5, 99) == "/jobkit-4711.3-5");
  CHECK(jobkit::detail::workspace_directory_name("ws", id, {0, 1, 2, 3, 4, 5, 6, 7}, 99) == "jobkit-ws-4711.3");

  // Another step, another job: other names.
  auto other_step = id;
  other_step.step_id = "4";
  CHECK(jobkit::detail::segment_name(other_step, 5, 99) != jobkit::detail::segment_name(id, 5, 99));
  auto other_job = id;
  other_job.job_id = "4712";
  CHECK(jobkit::detail::workspace_directory_name("ws", other_job, {0, 1}, 99) !=
        jobkit::detail::workspace_directory_name("ws", id, {0, 1}, 99));

  // Groups other than the world get a suffix of their own; the same members, the same one.
  const auto evens = jobkit::detail::workspace_directory_name("ws", id, {0, 2, 4, 6}, 99);
  const auto odds = jobkit::detail::workspace_directory_name("ws", id, {1, 3, 5, 7}, 99);
  CHECK(evens.starts_with("jobkit-ws-4711.3-g"));
  CHECK(evens != odds);
  CHECK(evens == jobkit::detail::workspace_directory_name("ws", id, {0, 2, 4, 6}, 12345));
  CHECK(jobkit::detail::workspace_directory_name("gather", id, {0, 2, 4, 6}, 99) != evens);

  // A PMIx namespace outside Slurm, and no launcher at all.
  jobkit::identity mpirun;
  mpirun.job_id = "prterun-vm-1234@1/x";
  CHECK(jobkit::detail::job_step_tag(mpirun, 99) == "prterun-vm-1234_1_x");
  CHECK(jobkit::detail::segment_name(jobkit::identity{}, 0, 4242) == "/jobkit-pid4242-0");
}

TEST_CASE("a single-rank workspace: writes replace the state, reads return it, the destructor cleans", "[workspace]") {
  scratch_dir root;
  fs::path directory;
  {
    jobkit::workspace ws(root.path() / "nested" / "ws");
    directory = ws.directory();
    CHECK(fs::is_directory(directory));
    CHECK(directory.parent_path() == root.path() / "nested" / "ws");
    CHECK(ws.path_of(0).parent_path() == directory);
    CHECK_FALSE(fs::exists(ws.path_of(0)));

    ws.write(bytes_of("first payload"));
    CHECK(ws.read(0) == jobkit::rank_state{"", bytes_of("first payload")});
    ws.write(R"({"layers": 4})", bytes_of("weights"));
    CHECK(ws.read(0) == jobkit::rank_state{R"({"layers": 4})", bytes_of("weights")});
    ws.write("", {});
    CHECK(ws.read(0) == jobkit::rank_state{});
    // Only the state itself is left: the temporary file was renamed.
    CHECK(std::distance(fs::directory_iterator(directory), fs::directory_iterator()) == 1);

    CHECK_THROWS_WITH(ws.read(1), Catch::Contains("rank=1 is not a rank of this group"));
  }
  CHECK_FALSE(fs::exists(directory));
}

TEST_CASE("a read of a state that never comes fails at its deadline, naming the rank and the path", "[workspace]") {
  scratch_dir root;
  jobkit::workspace ws(root.path());
  const auto start = std::chrono::steady_clock::now();
  try {
    ws.read(0, {.timeout = 300ms});
    FAIL("the read returned");
  } catch (const jobkit::timeout_error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("the state of rank 0 (" + jobkit::current_identity().hostname + ")"));
    CHECK_THAT(message, Catch::Contains(ws.path_of(0).string()));
    CHECK_THAT(message, Catch::Contains("within 300 ms"));
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= 300ms);
  CHECK(waited < 3s);
}

TEST_CASE("a read waits for a state written later", "[workspace]") {
  scratch_dir root;
  jobkit::workspace ws(root.path());
  std::thread writer([&] {
    std::this_thread::sleep_for(300ms);
    ws.write("late", bytes_of("but here"));
  });
  const auto state = ws.read(0, {.timeout = 10s});
  writer.join();
  CHECK(state == jobkit::rank_state{"late", bytes_of("but here")});
}

TEST_CASE("a reader racing a writer only ever sees complete states", "[workspace]") {
  scratch_dir root;
  jobkit::workspace ws(root.path());
  ws.write("0 0", {});
  constexpr std::uint64_t writes = 500;
  std::atomic<bool> done = false;
  std::thread writer([&] {
    for (std::uint64_t n = 1; n <= writes; ++n) {
      const auto s = numbered_state(n, (n * 7919) % 200000);  // sizes from 0 to 200 KB, in no order
      ws.write(s.config, s.payload);
    }
    done = true;
  });
  long reads = 0, partial = 0;
  std::uint64_t newest = 0;
  while (!done) {
    ++reads;
    try {
      const auto s = ws.read(0);
      if (!is_complete(s)) {
        ++partial;
        continue;
      }
      newest = std::max<std::uint64_t>(newest, std::stoull(s.config.substr(0, s.config.find(' '))));
    } catch (const jobkit::error& e) {  // a damaged file: a partial state
      UNSCOPED_INFO(e.what());
      ++partial;
    }
  }
  writer.join();
  INFO(reads << " reads, " << partial << " partial, newest state seen " << newest);
  CHECK(partial == 0);
  CHECK(reads > 10);
  CHECK(newest > 1);
  CHECK(ws.read(0) == numbered_state(writes, (writes * 7919) % 200000));
}

TEST_CASE("state left by a crashed attempt of the same job and step is removed at start", "[workspace]") {
  scratch_dir root;
  fs::path directory, state;
  {
    jobkit::workspace ws(root.path());
    directory = ws.directory();
    state = ws.path_of(0);
  }
  // What a crash leaves: a state, a half-written temporary file, another rank's state, a directory.
  fs::create_directories(directory / "leftover");
  std::ofstream(state) << "an old state";
  std::ofstream(state.string() + ".tmp") << "half";
  std::ofstream(directory / "rank-9.state") << "another rank";

  jobkit::workspace ws(root.path());
  CHECK(ws.directory() == directory);
  CHECK(fs::is_empty(directory));
  CHECK_THROWS_AS(ws.read(0, {.timeout = 50ms}), jobkit::timeout_error);
}

TEST_CASE("a damaged state is an error naming the path, not a silent partial read", "[workspace]") {
  scratch_dir root;
  jobkit::workspace ws(root.path());
  ws.write("config", bytes_of("a payload of some length"));
  const auto path = ws.path_of(0);
  fs::resize_file(path, fs::file_size(path) - 3);
  CHECK_THROWS_WITH(ws.read(0), Catch::Contains(path.string()) && Catch::Contains("the header announces 6 + 24 bytes"));
  std::ofstream(path) << "not a state at all, but long enough for a header";
  CHECK_THROWS_WITH(ws.read(0), Catch::Contains("wrong magic"));
}

TEST_CASE("members of a group read each other's states; the last one out removes the directory", "[workspace]") {
  scratch_dir root;
  fs::path directory;
  std::vector<std::optional<jobkit::rank_state>> seen(3);
  const auto errors = on_each_rank(3, [&](jobkit::group& g) {
    jobkit::workspace ws(root.path(), g);
    if (g.rank() == 0) directory = ws.directory();
    ws.write("from " + std::to_string(g.rank()), bytes_of(std::string(static_cast<std::size_t>(g.rank()) * 1000, 'x')));
    seen[static_cast<std::size_t>(g.rank())] = ws.read((g.rank() + 1) % 3);
    g.barrier();  // nobody destroys the workspace while another still reads
  });
  CHECK(errors == std::vector<std::string>(3));
  for (int r = 0; r < 3; ++r) {
    const int next = (r + 1) % 3;
    CHECK(seen[static_cast<std::size_t>(r)] ==
          jobkit::rank_state{"from " + std::to_string(next),
                             bytes_of(std::string(static_cast<std::size_t>(next) * 1000, 'x'))});
  }
  CHECK(directory.filename().string().starts_with("jobkit-ws-"));
  CHECK_FALSE(fs::exists(directory));
}

TEST_CASE("node_local_gather of one rank returns its own state", "[workspace]") {
  auto result = jobkit::node_local_gather("cfg", bytes_of("mine"), jobkit::world());
  CHECK(result.route == jobkit::gather_route::shared_memory);
  CHECK(result.states == std::vector<jobkit::rank_state>{{"cfg", bytes_of("mine")}});
}

TEST_CASE("node_local_gather on one host goes through shared memory, sizes differing per rank", "[workspace]") {
  constexpr int size = 5;
  const auto state_of = [](int r) {
    // Rank 3 sends nothing; rank 4 sends 3 MiB.
    const std::size_t bytes = r == 3 ? 0 : r == 4 ? std::size_t{3} << 20 : 1000 * static_cast<std::size_t>(r) + 1;
    return numbered_state(static_cast<std::uint64_t>(r), bytes);
  };
  std::vector<jobkit::gather_result> results(size);
  const auto errors = on_each_rank(size, [&](jobkit::group& g) {
    const auto mine = state_of(g.rank());
    results[static_cast<std::size_t>(g.rank())] = jobkit::node_local_gather(mine.config, mine.payload, g);
  });
  CHECK(errors == std::vector<std::string>(size));
  REQUIRE(results[0].states.size() == size);
  for (int r = 0; r < size; ++r) {
    CHECK(results[static_cast<std::size_t>(r)].route == jobkit::gather_route::shared_memory);
    CHECK(results[0].states[static_cast<std::size_t>(r)] == state_of(r));
    if (r > 0) CHECK(results[static_cast<std::size_t>(r)].states.empty());
    CHECK_FALSE(segment_exists(r));
  }
}

TEST_CASE("a segment left by a crashed earlier attempt does not block the gather and is replaced", "[workspace]") {
  const auto stale = segment_of(2);
  const int fd = ::shm_open(stale.c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "stale bytes of an earlier run", 29) == 29);
  ::close(fd);
  REQUIRE(segment_exists(2));

  std::vector<jobkit::rank_state> gathered;
  const auto errors = on_each_rank(3, [&](jobkit::group& g) {
    auto result = jobkit::node_local_gather(bytes_of("rank " + std::to_string(g.rank())), g);
    if (g.rank() == 0) gathered = result.states;
  });
  CHECK(errors == std::vector<std::string>(3));
  CHECK(gathered ==
        std::vector<jobkit::rank_state>{{"", bytes_of("rank 0")}, {"", bytes_of("rank 1")}, {"", bytes_of("rank 2")}});
  CHECK_FALSE(segment_exists(2));
}

TEST_CASE("a writer that cannot create its segment fails the gather on every rank and leaves none", "[workspace]") {
  // A directory under the segment's name cannot be removed as a stale segment.
  const fs::path obstacle = "/dev/shm" + segment_of(2);
  fs::create_directories(obstacle / "inside");
  const auto errors = on_each_rank(4, [&](jobkit::group& g) {
    jobkit::node_local_gather(bytes_of(std::string(100000, 'z')), g, {.call = {.timeout = 10s}});
  });
  fs::remove_all(obstacle);
  for (const auto& message : errors) {
    CHECK_THAT(message, Catch::Contains("node_local_gather: rank 2 (") &&
                            Catch::Contains("cannot remove the shared memory segment " + segment_of(2) +
                                            " left by an earlier attempt"));
  }
  for (int r = 0; r < 4; ++r) CHECK_FALSE(segment_exists(r));
}
