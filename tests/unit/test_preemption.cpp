// The stop agreement without a launcher: one rank of the world and in-process groups (threads as
// ranks), real signals raised in this process; time_left and requeue outside a Slurm job, from
// SLURM_JOB_END_TIME, and through stand-ins for libslurm (fake_libslurm.cpp) and the real one.
#include "jobkit/preemption.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../catch.hpp"
#include "jobkit/config.hpp"
#include "preemption/slurm_api.hpp"
#include "support.hpp"

using test_support::contains;
using test_support::on_ranks;

namespace {
std::atomic<int> custom_handler_calls{0};
extern "C" void custom_handler(int) { custom_handler_calls.fetch_add(1); }
}  // namespace

TEST_CASE("no signal, no stop") {
  jobkit::stop_guard stop;
  for (int i = 0; i < 5; ++i) CHECK_FALSE(stop.stop_requested());
  CHECK(stop.cause().reason == jobkit::stop_reason::none);
  CHECK(jobkit::to_string(stop.cause()) == "none");
}

TEST_CASE("a stop signal stops at the next check and stays stopped") {
  jobkit::stop_guard stop;
  CHECK_FALSE(stop.stop_requested());
  ::raise(SIGUSR1);
  CHECK(stop.stop_requested());
  CHECK(stop.cause() == jobkit::stop_cause{jobkit::stop_reason::signal, SIGUSR1, 0, {}});
  CHECK(jobkit::to_string(stop.cause()) == "SIGUSR1 on rank 0");
  CHECK(stop.stop_requested());
}

TEST_CASE("a signal from before the guard does not count") {
  {
    jobkit::stop_guard earlier;
    ::raise(SIGUSR2);
  }
  jobkit::stop_guard stop;
  CHECK_FALSE(stop.stop_requested());
}

TEST_CASE("check_every: the calls in between do not look") {
  jobkit::stop_guard stop({.check_every = 3});
  CHECK_FALSE(stop.stop_requested());  // call 1 agrees
  ::raise(SIGTERM);
  CHECK_FALSE(stop.stop_requested());  // 2
  CHECK_FALSE(stop.stop_requested());  // 3
  CHECK(stop.stop_requested());        // 4 agrees
  CHECK(stop.cause().signal == SIGTERM);
}

TEST_CASE("every rank of a group agrees, at the same call") {
  auto groups = test_support::inprocess_groups(3);
  std::atomic<int> ready{0};
  const auto outcomes = on_ranks(groups, [&](jobkit::group& g) {
    jobkit::stop_guard stop({}, g);
    ++ready;
    while (ready.load() < 3) {
    }
    const bool first = stop.stop_requested();
    if (g.rank() == 2) ::raise(SIGUSR1);
    // Rank 2 raised before its second call; the agreement waits for it, so all see it there.
    const bool second = stop.stop_requested();
    return std::tuple{first, second, stop.cause()};
  });
  for (const auto& o : outcomes) {
    REQUIRE(o.error.empty());
    CHECK_FALSE(std::get<0>(*o.value));
    CHECK(std::get<1>(*o.value));
    CHECK(std::get<2>(*o.value).signal == SIGUSR1);
  }
  CHECK(std::get<2>(*outcomes[0].value) == std::get<2>(*outcomes[1].value));
  CHECK(std::get<2>(*outcomes[1].value) == std::get<2>(*outcomes[2].value));
}

TEST_CASE("the previous signal disposition comes back after the last guard") {
  struct sigaction mine {};
  mine.sa_handler = custom_handler;
  sigemptyset(&mine.sa_mask);
  struct sigaction before {};
  ::sigaction(SIGUSR2, &mine, &before);
  {
    jobkit::stop_guard outer;
    { jobkit::stop_guard inner; }
    ::raise(SIGUSR2);  // still the guard's: recorded, not the custom handler
    CHECK(custom_handler_calls.load() == 0);
    CHECK(outer.stop_requested());
  }
  ::raise(SIGUSR2);
  CHECK(custom_handler_calls.load() == 1);
  ::sigaction(SIGUSR2, &before, nullptr);
}

TEST_CASE("bad stop options name themselves") {
  CHECK_THROWS_WITH(jobkit::stop_guard({.check_every = 0}), Catch::Contains("check_every=0"));
  CHECK_THROWS_WITH(jobkit::stop_guard({.time_margin = std::chrono::seconds(-1)}), Catch::Contains("time_margin"));
  CHECK_THROWS_WITH(jobkit::stop_guard({.signals = {SIGKILL}}), Catch::Contains("cannot be caught"));
  CHECK_THROWS_WITH(jobkit::stop_guard({.timeout = std::chrono::milliseconds(-5)}), Catch::Contains("stop_guard"));
}

TEST_CASE("time_left and requeue outside a Slurm job") {
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("SLURM_JOB_END_TIME");
  CHECK_FALSE(jobkit::time_left());
  try {
    jobkit::requeue();
    FAIL("no error");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_environment);
    CHECK(contains(e.what(), "SLURM_JOB_ID is not set"));
  }
  ::setenv("SLURM_JOB_ID", "12x", 1);
  CHECK_THROWS_WITH(jobkit::time_left(), Catch::Contains("SLURM_JOB_ID='12x' is not a Slurm job id"));
  CHECK_THROWS_WITH(jobkit::requeue(), Catch::Contains("SLURM_JOB_ID='12x'"));
  ::unsetenv("SLURM_JOB_ID");
}

TEST_CASE("stop causes read well") {
  CHECK(jobkit::to_string(jobkit::stop_reason::time_limit) == "time_limit");
  CHECK(jobkit::to_string(jobkit::stop_cause{jobkit::stop_reason::time_limit, 0, -1, std::chrono::seconds(42)}) ==
        "42 s left, below the margin");
  CHECK(jobkit::to_string(jobkit::stop_cause{jobkit::stop_reason::signal, SIGTERM, 3, {}}) == "SIGTERM on rank 3");
}

// ---- time_left from SLURM_JOB_END_TIME, and libslurm in a child process ----

namespace {

using std::chrono::seconds;
using steady = std::chrono::steady_clock;

/// Sets (nullptr: unsets) an environment variable for the scope; its value before comes back.
class scoped_env {
 public:
  scoped_env(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~scoped_env() {
    if (before_) {
      ::setenv(name_, before_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};

std::string fake_slurm(const std::string& name) {
  return std::string(JOBKIT_FAKE_SLURM_DIR) + "/libfake_slurm_" + name + ".so";
}

std::string end_time_in(long seconds_from_now) {
  const auto now = std::chrono::duration_cast<seconds>(std::chrono::system_clock::now().time_since_epoch());
  return std::to_string(now.count() + seconds_from_now);
}

/// No child of this process is left, not even a zombie.
bool no_children() { return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD; }

/// Written by an atexit handler when it runs in a process other than the test's own.
pid_t test_pid = 0;
int atexit_in_child_fd = -1;
extern "C" void report_atexit_in_child() {
  if (::getpid() != test_pid && ::write(atexit_in_child_fd, "x", 1) < 0) ::_exit(99);
}
/// The same for a thread_local's destructor (exit() runs the calling thread's first).
struct reports_destruction_in_child {
  bool used = false;
  ~reports_destruction_in_child() { report_atexit_in_child(); }
};
thread_local reports_destruction_in_child thread_state;

}  // namespace

TEST_CASE("time_left: SLURM_JOB_END_TIME without libslurm, with or without SLURM_JOB_ID") {
  scoped_env no_library("JOBKIT_LIBSLURM", "/nonexistent/libslurm.so.42");
  scoped_env no_job("SLURM_JOB_ID", std::nullopt);
  {
    scoped_env end("SLURM_JOB_END_TIME", end_time_in(3600));
    const auto left = jobkit::time_left();
    REQUIRE(left);
    CHECK(*left >= seconds(3598));
    CHECK(*left <= seconds(3600));
    scoped_env job("SLURM_JOB_ID", "1234");
    const auto in_job = jobkit::time_left(seconds(0));
    REQUIRE(in_job);
    CHECK(*in_job >= seconds(3598));
  }
  {
    // Past the end (the step outlived a snapshot, or the clock is ahead): nothing left.
    scoped_env end("SLURM_JOB_END_TIME", end_time_in(-100));
    CHECK(jobkit::time_left() == seconds(0));
  }
  {
    // Slurm's end time for a job without a time limit is a year ahead: no limit, unknown.
    scoped_env end("SLURM_JOB_END_TIME", end_time_in(365L * 24 * 3600));
    CHECK_FALSE(jobkit::time_left());
  }
  {
    scoped_env end("SLURM_JOB_END_TIME", end_time_in(299L * 24 * 3600));
    const auto left = jobkit::time_left();
    REQUIRE(left);
    CHECK(*left > seconds(298L * 24 * 3600));
  }
}

TEST_CASE("time_left: a malformed SLURM_JOB_END_TIME is an error naming it and its value") {
  scoped_env job("SLURM_JOB_ID", "1234");
  for (const std::string value : {"", "12x", "-5", " 17", "+17", "0", "1e9", "1700000000.5", "9999999999999"}) {
    scoped_env end("SLURM_JOB_END_TIME", value);
    try {
      jobkit::time_left();
      FAIL("no error for SLURM_JOB_END_TIME='" << value << "'");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == jobkit::errc::invalid_environment);
      CHECK(contains(e.what(), "SLURM_JOB_END_TIME='" + value + "' is not a time"));
    }
  }
}

TEST_CASE("time_left: SLURM_JOB_END_TIME comes before libslurm") {
  scoped_env library("JOBKIT_LIBSLURM", fake_slurm("42"));  // would answer 4242 s
  scoped_env job("SLURM_JOB_ID", "1234");
  scoped_env end("SLURM_JOB_END_TIME", end_time_in(100));
  const auto left = jobkit::time_left(seconds(0));
  REQUIRE(left);
  CHECK(*left >= seconds(98));
  CHECK(*left <= seconds(100));
}

// The calls into libslurm exist only where jobkit was built with Slurm's headers (libslurm-dev); a
// build without them says so instead of asking.
#if JOBKIT_HAS_SLURM_HEADERS

TEST_CASE("time_left and requeue through libslurm.so.42 (a job id) and .45 (slurm_step_id_t)") {
  scoped_env no_end("SLURM_JOB_END_TIME", std::nullopt);
  for (const auto& [name, answer] : {std::pair{"42", 4242L}, std::pair{"45", 4545L}}) {
    INFO("libslurm.so." << name);
    scoped_env library("JOBKIT_LIBSLURM", fake_slurm(name));
    // .45 answers -2 unless every field of the slurm_step_id_t is that of the whole job.
    const auto direct = jobkit::detail::slurm_remaining_seconds(1234);
    CHECK(direct.answered);
    CHECK(direct.value == answer);
    CHECK(jobkit::detail::slurm_remaining_seconds(999).value == -1);
    {
      scoped_env job("SLURM_JOB_ID", "1234");
      const auto left = jobkit::time_left(seconds(0));
      REQUIRE(left);
      CHECK(*left >= seconds(answer - 1));
      CHECK(*left <= seconds(answer));
      CHECK_NOTHROW(jobkit::requeue());
    }
    {
      scoped_env job("SLURM_JOB_ID", "999");  // Slurm does not know it: unknown
      CHECK_FALSE(jobkit::time_left(seconds(0)));
    }
    {
      scoped_env job("SLURM_JOB_ID", "1235");  // already pending: requeued, as wanted
      CHECK_NOTHROW(jobkit::requeue());
    }
    scoped_env job("SLURM_JOB_ID", "999");
    try {
      jobkit::requeue();
      FAIL("no error");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == jobkit::errc::scheduler);
      CHECK(e.native_status() == 2037);
      CHECK(contains(e.what(), "requeue of job 999: Slurm refused: fake Slurm error 2037"));
    }
  }
  CHECK(no_children());
}

TEST_CASE("a libslurm that calls exit() in slurm_init ends its child, never the caller") {
  scoped_env no_end("SLURM_JOB_END_TIME", std::nullopt);
  scoped_env library("JOBKIT_LIBSLURM", fake_slurm("exit"));
  int marks[2];
  REQUIRE(::pipe(marks) == 0);
  test_pid = ::getpid();
  atexit_in_child_fd = marks[1];
  std::atexit(report_atexit_in_child);

  jobkit::detail::slurm_answer answer;
  // From a thread with a thread_local to destroy, as a caller's thread may have.
  std::thread([&] {
    thread_state.used = true;
    answer = jobkit::detail::slurm_remaining_seconds(1234);
  }).join();
  CHECK_FALSE(answer.answered);
  CHECK(contains(answer.message,
                 "libslurm exited with status 1: it found no Slurm configuration (is slurm.conf or "
                 "SLURM_CONF reachable in this container?); it printed: fatal: Could not establish "
                 "a configuration source"));
  // The exit ran none of this process's atexit handlers and thread_local destructors in the child.
  ::close(marks[1]);
  atexit_in_child_fd = -1;
  char mark = 0;
  CHECK(::read(marks[0], &mark, 1) == 0);
  ::close(marks[0]);

  scoped_env job("SLURM_JOB_ID", "1234");
  try {
    jobkit::requeue();
    FAIL("no error");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::scheduler);
    CHECK(contains(e.what(), "requeue of job 1234: libslurm exited with status 1: it found no Slurm configuration"));
  }
  char calls_path[] = "/tmp/jobkit-test-slurm-calls-XXXXXX";
  const int calls_fd = ::mkstemp(calls_path);
  REQUIRE(calls_fd >= 0);
  ::close(calls_fd);
  scoped_env calls("FAKE_SLURM_CALLS", calls_path);
  const auto slurm_inits = [&] {
    std::ifstream lines(calls_path);
    return std::count(std::istreambuf_iterator<char>(lines), std::istreambuf_iterator<char>(), '\n');
  };
  CHECK_FALSE(jobkit::time_left(seconds(0)));
  CHECK(slurm_inits() == 1);
  // Remembered: not asked again with the same library and configuration, asked with another.
  CHECK_FALSE(jobkit::time_left(seconds(0)));
  CHECK(slurm_inits() == 1);
  {
    scoped_env other("JOBKIT_LIBSLURM", fake_slurm("42"));
    CHECK(jobkit::time_left(seconds(0)));
    CHECK(slurm_inits() == 2);
  }
  ::unlink(calls_path);
  CHECK(no_children());
}

TEST_CASE("a libslurm that never returns is killed at the deadline") {
  scoped_env library("JOBKIT_LIBSLURM", fake_slurm("hang"));
  const auto before = steady::now();
  const auto answer = jobkit::detail::slurm_remaining_seconds(1234, std::chrono::milliseconds(500));
  const auto took = steady::now() - before;
  CHECK(took >= std::chrono::milliseconds(500));
  CHECK(took < seconds(2));
  CHECK_FALSE(answer.answered);
  CHECK(answer.message ==
        "libslurm did not answer within 0.5 s (its process was killed); it printed: slurm_init: waiting forever");
  CHECK(no_children());
}

TEST_CASE("a libslurm whose soname is unknown or missing is refused before any call") {
  struct refusal {
    std::string library, message;
  };
  for (const auto& [library, message] :
       {refusal{fake_slurm("46"),
                "libfake_slurm_46.so' is libslurm.so.46, whose ABI jobkit does not know (it knows "
                "libslurm.so.37 to .45, Slurm 21.08 to 26.05; a newer Slurm may take other "
                "arguments): not called"},
        refusal{fake_slurm("nosoname"),
                "libfake_slurm_nosoname.so' has no soname, so its Slurm release and ABI "
                "are unknown"},
        refusal{"/nonexistent/libslurm.so", "JOBKIT_LIBSLURM='/nonexistent/libslurm.so' could not be loaded: "}}) {
    scoped_env chosen("JOBKIT_LIBSLURM", library);
    for (const auto& answer : {jobkit::detail::slurm_remaining_seconds(1234), jobkit::detail::slurm_requeue(1234)}) {
      CHECK_FALSE(answer.answered);
      CHECK(contains(answer.message, message));
    }
  }
}

TEST_CASE("libslurm calls from a busy multi-threaded process, with SIGCHLD reaped or ignored") {
  scoped_env library("JOBKIT_LIBSLURM", fake_slurm("42"));
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  // glibc's malloc is fork-safe, which is what this part checks; the sanitizers' allocators, which
  // replace it in the TSan and ASan builds, are not (g++ 12's: no fork handlers; a forked child that
  // allocates while a busy thread held their lock at the fork gets no answer out: seen under TSan,
  // and once under ASan in a loaded CI run on 2026-11-25).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int busy_threads = 0;
#else
  constexpr int busy_threads = 3;
#endif
  for (int t = 0; t < busy_threads; ++t) {
    busy.emplace_back([&] {
      while (!stop.load()) {
        std::vector<std::string> junk(64, std::string(100, 'x'));  // malloc and free all the time
      }
    });
  }
  for (int i = 0; i < 10; ++i) CHECK(jobkit::detail::slurm_remaining_seconds(1234).value == 4242);
  stop = true;
  for (auto& t : busy) t.join();

  struct sigaction before {};
  // A handler that reaps every child, as some programs install (keeping errno, as a handler must).
  for (const auto disposition : {SIG_IGN, +[](int) {
                                   const int saved = errno;
                                   while (::waitpid(-1, nullptr, WNOHANG) > 0) {
                                   }
                                   errno = saved;
                                 }}) {
    struct sigaction changed {};
    changed.sa_handler = disposition;
    sigemptyset(&changed.sa_mask);
    ::sigaction(SIGCHLD, &changed, &before);
    const auto answer = jobkit::detail::slurm_remaining_seconds(1234);
    ::sigaction(SIGCHLD, &before, nullptr);
    CHECK(answer.answered);
    CHECK(answer.value == 4242);
  }
  CHECK(no_children());
}

TEST_CASE("the real libslurm without a configuration: time_left returns within the deadline") {
  scoped_env library("JOBKIT_LIBSLURM", std::nullopt);
  scoped_env config("SLURM_CONF", "/nonexistent/slurm.conf");  // libslurm retries for a minute
  scoped_env no_end("SLURM_JOB_END_TIME", std::nullopt);
  scoped_env job("SLURM_JOB_ID", "1234");
  const auto probe = jobkit::detail::slurm_remaining_seconds(1234, std::chrono::milliseconds(1500));
  if (contains(probe.message, "no libslurm could be loaded")) {
    WARN("no libslurm here: the real libslurm is not tried (" << probe.message << ")");
    return;
  }
  CHECK_FALSE(probe.answered);
  CHECK(contains(probe.message,
                 "libslurm did not answer within 1.5 s (its process was killed): it found no Slurm "
                 "configuration (is slurm.conf or SLURM_CONF reachable in this container?); it "
                 "printed: "));
  CHECK(contains(probe.message, "/nonexistent/slurm.conf"));
  const auto before = steady::now();
  CHECK_FALSE(jobkit::time_left(seconds(0)));
  const auto took = steady::now() - before;
  CHECK(took >= jobkit::detail::slurm_call_deadline);
  CHECK(took < jobkit::detail::slurm_call_deadline + seconds(2));
  CHECK(no_children());
}

#else

TEST_CASE("built without Slurm's headers: time_left and requeue say so instead of asking libslurm") {
  scoped_env no_end("SLURM_JOB_END_TIME", std::nullopt);
  scoped_env job("SLURM_JOB_ID", "1234");
  const auto probe = jobkit::detail::slurm_remaining_seconds(1234);
  CHECK_FALSE(probe.answered);
  CHECK(probe.message == "jobkit was built without Slurm's headers (libslurm-dev)");
  CHECK_FALSE(jobkit::time_left(seconds(0)));
}

#endif
