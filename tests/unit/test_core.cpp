// The mechanisms of src/core written once for every folder: the bounded blocking call, the
// capped doubling back-off, the write-all loop, the shared-library opener, the child process
// (spawned, its signals forwarded, reaped with a bound) and run_bounded on it.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "core/backoff.hpp"
#include "core/bounded_call.hpp"
#include "core/child_process.hpp"
#include "core/command.hpp"
#include "core/embedder.hpp"
#include "core/posix_io.hpp"
#include "core/shared_library.hpp"
#include "jobkit/error.hpp"

using namespace std::chrono_literals;
using jobkit::detail::backoff;
using jobkit::detail::bounded_call;
using steady = std::chrono::steady_clock;

TEST_CASE("a bounded call returns what the call returned", "[core][bounded_call]") {
  bounded_call call([] { return std::string("answer"); });
  const auto result = call.wait(steady::now() + 10s);
  REQUIRE(result);
  CHECK(*result == "answer");
}

TEST_CASE("a bounded call past its deadline says so and leaves the call running", "[core][bounded_call]") {
  auto release = std::make_shared<std::promise<void>>();
  auto returned = std::make_shared<std::atomic<bool>>(false);
  std::shared_future<void> go = release->get_future().share();
  {
    bounded_call call([go, returned] {
      go.wait();
      returned->store(true);
      return 7;
    });
    const auto start = steady::now();
    CHECK_FALSE(call.wait(start + 100ms));
    CHECK(steady::now() - start >= 100ms);
    CHECK_FALSE(returned->load());
  }  // the caller's handle is gone; the thread holds the state
  release->set_value();
  for (int i = 0; i < 500 && !returned->load(); ++i) std::this_thread::sleep_for(10ms);
  CHECK(returned->load());
}

TEST_CASE("a bounded call runs while_waiting meanwhile and passes on its exception", "[core][bounded_call]") {
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  bounded_call call([go] {
    go.wait();
    return 1;
  });
  int checks = 0;
  CHECK_FALSE(call.wait(steady::now() + 300ms, [&] { ++checks; }));
  CHECK(checks >= 3);  // every 50 ms
  CHECK_THROWS_AS(call.wait(steady::now() + 10s, [] { throw std::runtime_error("a rank died"); }), std::runtime_error);
  release.set_value();
  const auto result = call.wait(steady::now() + 10s, [] {});
  REQUIRE(result);
  CHECK(*result == 1);
}

TEST_CASE("checked_wait ends when done or at the deadline", "[core][bounded_call]") {
  std::mutex mutex;
  std::condition_variable signal;
  std::unique_lock lock(mutex);
  CHECK(jobkit::detail::checked_wait(lock, signal, steady::now() + 10s, [] { return true; }, {}));
  const auto start = steady::now();
  CHECK_FALSE(jobkit::detail::checked_wait(lock, signal, start + 60ms, [] { return false; }, {}));
  CHECK(steady::now() - start >= 60ms);
  CHECK(lock.owns_lock());
}

TEST_CASE("the back-off doubles from its first pause up to its cap", "[core][backoff]") {
  backoff pauses(5ms, 100ms);
  std::vector<long long> seen;
  for (int i = 0; i < 8; ++i)
    seen.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(pauses.next()).count());
  CHECK(seen == std::vector<long long>{5, 10, 20, 40, 80, 100, 100, 100});
  backoff fine(100us, 20000us);
  std::vector<long long> micro;
  for (int i = 0; i < 10; ++i) micro.push_back(fine.next().count());
  CHECK(micro == std::vector<long long>{100, 200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000});
}

TEST_CASE("a pause before a retry ends at the deadline, and an interruptible one runs the hook", "[core][backoff]") {
  using std::chrono::steady_clock;
  // Bounds with generous slack: a 60 s pause cut at a deadline 20 ms away returns well before it.
  auto start = steady_clock::now();
  jobkit::detail::pause_until(60s, start + 20ms);
  CHECK(steady_clock::now() - start < 10s);
  start = steady_clock::now();
  jobkit::detail::pause_until(60s, start - 1s);  // past: no pause at all
  jobkit::detail::interruptible_pause_until(60s, start - 1s);
  CHECK(steady_clock::now() - start < 10s);
  // The hook runs after each slice (250 ms at most) and may abandon the wait.
  struct abandoned {};
  jobkit::detail::set_interrupt_hook([] { throw abandoned{}; });
  start = steady_clock::now();
  CHECK_THROWS_AS(jobkit::detail::interruptible_pause_until(60s, start + 60s), abandoned);
  jobkit::detail::set_interrupt_hook(nullptr);
  CHECK(steady_clock::now() - start < 10s);
}

TEST_CASE("the back-off's jitter is a factor from 0.5 to 1.5 of each pause", "[core][backoff]") {
  backoff pauses(50ms, 1000ms, backoff::jitter::half_to_one_and_a_half);
  backoff plain(50ms, 1000ms);
  bool varied = false;
  backoff::duration first{};
  for (int i = 0; i < 200; ++i) {
    const auto base = plain.next();
    const auto pause = pauses.next();
    CHECK(pause >= base / 2);
    CHECK(pause < base * 3 / 2);
    if (i >= 5) {  // at the cap
      if (i == 5) first = pause;
      varied = varied || pause != first;
    }
  }
  CHECK(varied);
  for (int i = 0; i < 10000; ++i) {
    const double factor = jobkit::detail::jitter_factor();
    REQUIRE(factor >= 0.5);
    REQUIRE(factor < 1.5);
  }
}

TEST_CASE("write_file_all writes every byte, past partial writes to a pipe", "[core][posix_io]") {
  int ends[2];
  REQUIRE(::pipe(ends) == 0);
  jobkit::detail::descriptor in(ends[0]), out(ends[1]);
  const std::string text(1 << 20, 'x');  // far beyond a pipe's 64 KiB: several partial writes
  std::string read;
  std::thread reader([&] {
    char buffer[4096];
    for (ssize_t n; (n = ::read(in.get(), buffer, sizeof buffer)) > 0;)
      read.append(buffer, static_cast<std::size_t>(n));
  });
  CHECK(jobkit::detail::write_file_all(out.get(), text.data(), text.size()) == 0);
  CHECK(out.close() == 0);
  reader.join();
  CHECK(read == text);
}

TEST_CASE("write_file_all returns the errno of the write that failed", "[core][posix_io]") {
  static_assert(noexcept(jobkit::detail::write_file_all(0, nullptr, 0)));
  CHECK(jobkit::detail::write_file_all(-1, "x", 1) == EBADF);
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  jobkit::detail::descriptor read_only(fd);
  CHECK(jobkit::detail::write_file_all(read_only.get(), "x", 1) == EBADF);
  CHECK(jobkit::detail::write_file_all(read_only.get(), "", 0) == 0);
}

TEST_CASE("the shared-library opener tries the soname, its other names, then the search dirs",
          "[core][shared_library]") {
  jobkit::detail::library_request request{
      "libjobkit_absent.so.1", "absent",   "/nowhere:/neither", 0,
      jobkit::errc::pmix,      "the test", "nothing",           {"libjobkit_absent.so"}};
  CHECK(jobkit::detail::library_candidates(request) ==
        std::vector<std::string>{"libjobkit_absent.so.1", "libjobkit_absent.so", "/nowhere/libjobkit_absent.so.1",
                                 "/neither/libjobkit_absent.so.1"});
  std::vector<jobkit::detail::library_failure> failures;
  CHECK_FALSE(jobkit::detail::try_open_shared_library(request, failures));
  REQUIRE(failures.size() == 4);
  CHECK(failures[1].name == "libjobkit_absent.so");
  CHECK_FALSE(failures[1].why.empty());
  try {
    (void)jobkit::detail::open_shared_library(request);
    FAIL("opened a library that is not there");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::pmix);
    CHECK_THAT(e.what(), Catch::Contains("the test needs libjobkit_absent.so.1 (nothing, which jobkit was built "
                                         "against) and it could not be loaded; tried:\n  libjobkit_absent.so.1: "));
    CHECK_THAT(e.what(), Catch::Contains("\n  /neither/libjobkit_absent.so.1: "));
  }
}

TEST_CASE("the shared-library opener says which name loaded, and binds calls", "[core][shared_library]") {
  jobkit::detail::library_request request{"libjobkit_absent.so.1", "cos",      "",     RTLD_NOW | RTLD_LOCAL,
                                          jobkit::errc::internal,  "the test", "libm", {"libm.so.6"}};
  std::vector<jobkit::detail::library_failure> failures;
  const auto library = jobkit::detail::try_open_shared_library(request, failures);
  REQUIRE(library);
  CHECK(library->name == "libm.so.6");
  CHECK(library->soname == "libjobkit_absent.so.1");
  CHECK_THAT(library->path, Catch::Contains("libm"));
  REQUIRE(failures.size() == 1);
  struct calls {
    double (*cos)(double) = nullptr;
    double (*absent)(double) = nullptr;
  };
  CHECK(jobkit::detail::bind_calls<calls>(request, [](calls& c, const auto& lib, auto& missing) {
          jobkit::detail::look_up(c.cos, lib, "cos", missing);
        }).cos(0.0) == 1.0);
  CHECK_THROWS_WITH(jobkit::detail::bind_calls<calls>(request,
                                                      [](calls& c, const auto& lib, auto& missing) {
                                                        jobkit::detail::look_up(c.cos, lib, "cos", missing);
                                                        jobkit::detail::look_up(c.absent, lib, "jobkit_absent",
                                                                                missing);
                                                      }),
                    Catch::Contains("lacks jobkit_absent: it is older than libm"));
}

TEST_CASE("run_bounded gives the child's outputs apart and its exit status", "[core][command]") {
  const auto result = jobkit::detail::run_bounded({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10s);
  CHECK(result.status == 3);
  CHECK(result.out == "out\n");
  CHECK(result.err == "err\n");
  const auto missing = jobkit::detail::run_bounded({"/nonexistent/program"}, 10s);
  CHECK(missing.status == 127);
  CHECK(missing.err == "No such file or directory");
}

TEST_CASE("run_bounded ends a child at its deadline even after it closed both outputs", "[core][command]") {
  // Before the one child helper, the wait for the child had no bound once its pipes closed: this
  // took the child's whole 20 s and returned its status 0.
  const auto start = steady::now();
  const auto closed = jobkit::detail::run_bounded({"sh", "-c", "exec >&- 2>&-; exec sleep 20"}, 300ms);
  const auto took = steady::now() - start;
  CHECK(closed.status == 124);
  CHECK(took >= 300ms);
  CHECK(took < 3s);
}

TEST_CASE("run_bounded kills a child that ignores SIGTERM a second after it", "[core][command]") {
  const auto start = steady::now();
  const auto stubborn = jobkit::detail::run_bounded({"sh", "-c", "trap '' TERM; exec >&- 2>&-; exec sleep 20"}, 200ms);
  const auto took = steady::now() - start;
  CHECK(stubborn.status == 124);
  CHECK(took >= 1200ms);  // SIGTERM at the deadline, SIGKILL a second later
  CHECK(took < 4s);
}

TEST_CASE("a child that dies with its parent is spawned with fork, reports a start failure, and is reaped",
          "[core][child_process]") {
  jobkit::detail::child_process exits({"sh", "-c", "exit 5"}, {.die_with_parent = true});
  REQUIRE(exits.started());
  CHECK(exits.wait() == 5);
  CHECK(exits.end_signal() == 0);
  jobkit::detail::child_process missing({"no-such-program-anywhere-jobkit"}, {.die_with_parent = true});
  CHECK_FALSE(missing.started());
  CHECK(missing.start_error() == "No such file or directory");
  jobkit::detail::child_process killed({"sh", "-c", "kill -9 $$"});
  REQUIRE(killed.started());
  CHECK(killed.wait() == 128 + SIGKILL);
  CHECK(killed.end_signal() == SIGKILL);
}

TEST_CASE("the signal forwarder passes a signal on to the child, one that came early included",
          "[core][child_process]") {
  jobkit::detail::signal_forwarder forwarding(jobkit::detail::stop_signals);
  ::raise(SIGUSR1);  // before the child exists: it waits in the forwarder
  jobkit::detail::child_process child({"sh", "-c", "trap 'exit 7' USR1; while :; do sleep 0.05; done"},
                                      {.die_with_parent = true});
  REQUIRE(child.started());
  std::this_thread::sleep_for(300ms);  // the shell has set its trap
  CHECK(child.wait(&forwarding) == 7);
}

TEST_CASE("the signal forwarder's handler keeps errno, even when its pipe is full", "[core][child_process]") {
  jobkit::detail::signal_forwarder forwarding(jobkit::detail::stop_signals);
  bool kept = true;
  for (int i = 0; i < 10000 && kept; ++i) {  // past the pipe's capacity: the handler's write fails (EAGAIN)
    errno = EDOM;
    ::raise(SIGUSR2);
    kept = errno == EDOM;
  }
  CHECK(kept);
  CHECK_THROWS_AS(jobkit::detail::signal_forwarder(jobkit::detail::stop_signals), jobkit::error);
}

TEST_CASE("environment_with: a child's environment changed, this process's not") {
  ::setenv("JOBKIT_TEST_KEPT", "1", 1);
  ::setenv("JOBKIT_TEST_REMOVED", "2", 1);
  ::setenv("JOBKIT_TEST_CHANGED", "3", 1);
  const auto entries = jobkit::detail::environment_with(
      {{"JOBKIT_TEST_REMOVED", std::nullopt}, {"JOBKIT_TEST_CHANGED", "c1,c3"}, {"JOBKIT_TEST_NEW", "x=y"}});
  const auto count = [&](const std::string& entry) { return std::count(entries.begin(), entries.end(), entry); };
  CHECK(count("JOBKIT_TEST_KEPT=1") == 1);
  CHECK(count("JOBKIT_TEST_CHANGED=c1,c3") == 1);
  CHECK(count("JOBKIT_TEST_CHANGED=3") == 0);
  CHECK(count("JOBKIT_TEST_NEW=x=y") == 1);
  CHECK(std::none_of(entries.begin(), entries.end(),
                     [](const std::string& e) { return e.starts_with("JOBKIT_TEST_REMOVED="); }));
  // A child sees it so.

  {
    jobkit::detail::child_process child(
        {"/bin/sh", "-c", "test \"$JOBKIT_TEST_CHANGED\" = c1,c3 && test -z \"${JOBKIT_TEST_REMOVED+set}\""},
        {.environment = &entries});
    REQUIRE(child.started());
    CHECK(child.wait() == 0);
  }
  CHECK(std::string(std::getenv("JOBKIT_TEST_CHANGED")) == "3");
  CHECK(std::string(std::getenv("JOBKIT_TEST_REMOVED")) == "2");
  for (const char* name : {"JOBKIT_TEST_KEPT", "JOBKIT_TEST_REMOVED", "JOBKIT_TEST_CHANGED"}) ::unsetenv(name);
}
