// `jobkit where`'s parts without a cluster (src/where): the rule of when it is on, the record a
// process keeps of its jobkit calls (under threads and fork), what the agent reads in /proc and when
// it asks for a Python stack, the stack read from faulthandler's dump, one rank's answer, the folded
// report, and the step's own report.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "core/environment.hpp"
#include "jobkit/error.hpp"
#include "where/proc.hpp"
#include "where/record.hpp"
#include "where/report.hpp"
#include "where/settings.hpp"
#include "where/watch.hpp"

using namespace jobkit::where;

TEST_CASE("a process's record: the call in progress, then the last one that ended") {
  // The record is made at the first call, in a Slurm step; found through /proc/PID/fd.
  ::setenv("SLURM_JOB_ID", "990001", 1);
  ::setenv("SLURM_STEP_ID", "4", 1);
  CHECK(find_files(::getpid()).record.empty());
  {
    const call_scope outer({.call = "barrier", .site = "train.py:31", .rank = 3, .group_size = 8});
    {
      const call_scope inner(
          {.call = "all_gather", .site = "helpers.cpp:10", .rank = 3, .group_size = 8});  // a call inside a call
      const auto both = read_record(find_files(::getpid()).record);
      REQUIRE(both);
      CHECK(both->calls == 2);
      CHECK(both->call == "barrier");  // the oldest
    }
    const auto path = find_files(::getpid()).record;
    REQUIRE(path.starts_with("/proc/"));
    const auto during = read_record(path);
    REQUIRE(during);
    CHECK(during->in_call);
    CHECK(during->call == "barrier");
    CHECK(during->site == "train.py:31");
    CHECK(during->rank == 3);
    CHECK(during->group_size == 8);
    CHECK(during->pid == ::getpid());
  }
  const auto path = find_files(::getpid()).record;
  const auto after = read_record(path);
  REQUIRE(after);
  CHECK_FALSE(after->in_call);
  CHECK(after->last_call == "barrier");
  CHECK(after->last_site == "train.py:31");
  const std::string long_site(300, 's');
  const std::string long_call(100, 'c');
  {
    const call_scope cut_names({.call = long_call, .site = long_site, .rank = 0, .group_size = 1});  // cut to fit
    const auto cut = read_record(path);
    REQUIRE(cut);
    CHECK(cut->call.size() == 31);
    CHECK(cut->site.size() == 127);
  }
  {
    // More calls at once than the record has slots: each past them is counted, not named.
    std::vector<std::unique_ptr<call_scope>> many;
    for (int i = 0; i < record_layout::slot_count + 2; ++i) {
      many.push_back(std::make_unique<call_scope>(call_info{.call = "barrier", .site = "x.cpp:" + std::to_string(i)}));
    }
    const auto full = read_record(path);
    REQUIRE(full);
    CHECK(full->calls == record_layout::slot_count + 2);
    CHECK(full->site == "x.cpp:0");
  }
  const auto none = read_record(path);
  REQUIRE(none);
  CHECK(none->calls == 0);
  CHECK_FALSE(none->in_call);
  // A straggler score (progress tracking's exchange): none until one is recorded, then the last.
  CHECK_FALSE(none->score);
  CHECK(format_score(3, "c1", *none).empty());
  record_score(0.483, 0.75, 20);
  record_score(0.5, 0.75, 40);
  const auto scored = read_record(path);
  REQUIRE(scored);
  REQUIRE(scored->score);
  CHECK(*scored->score == 0.5);
  CHECK(scored->score_threshold == 0.75);
  CHECK(scored->score_agreement == 40);
  CHECK(format_score(3, "c1", *scored) == "#score 3 c1 0.500 0.750 40\n");
  CHECK_FALSE(read_record("/proc/self/fd/999999"));
  CHECK(find_files(::getpid()).stack.empty());  // no Python here
  CHECK(find_files(999999999).record.empty());
  CHECK_FALSE(read_record("/proc/self/status"));  // not a record
}

TEST_CASE("a Python stack from faulthandler's dump: the interrupted thread, innermost first") {
  const std::string dump =
      "Thread 0x00007f0000000002 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
      "\n"
      "Current thread 0x00007f0000000001 (most recent call first):\n"
      "  File \"/work/data.py\", line 12 in load_shard\n"
      "  File \"/work/train.py\", line 27 in train_step\n"
      "  File \"/work/train.py\", line 40 in <module>\n";
  CHECK(python_frames(dump) == "load_shard data.py:12 <- train_step train.py:27 <- <module> train.py:40");
  CHECK(python_frames("Stack (most recent call first):\n  File \"x.py\", line 1 in f\n") == "f x.py:1");
  CHECK_FALSE(python_frames(""));
  CHECK_FALSE(python_frames("Current thread 0x1 (most recent call first):\n  <no Python frame>\n"));
}

TEST_CASE("one rank's answer: its call, its stack, or what /proc says") {
  record_view in_call;
  in_call.in_call = true;
  in_call.call = "barrier";
  in_call.site = "train.py:31";
  in_call.since_ns = 1'000'000'000;
  in_call.group_size = 7;
  auto a = describe(2, "c1", in_call, std::nullopt, "python3 S (sleeping)", 43'500'000'000);
  CHECK(a.text == "in barrier at train.py:31");
  CHECK(a.seconds == 42);
  CHECK(a.group_size == 7);
  record_view ended;
  ended.last_call = "all_reduce";
  ended.last_site = "train.py:20";
  ended.last_ended_ns = 40'000'000'000;
  a = describe(5, "c2", ended, std::string("load_shard data.py:12"), "python3 S (sleeping)", 43'000'000'000);
  CHECK(a.text ==
        "not in jobkit: load_shard data.py:12 (its last jobkit call: all_reduce at train.py:20, ended 3 s ago)");
  CHECK(a.seconds == -1);
  a = describe(6, "c3", std::nullopt, std::nullopt, "sleep S (sleeping) in hrtimer_nanosleep", 0);
  CHECK(a.text == "not in jobkit: sleep S (sleeping) in hrtimer_nanosleep");
  a = describe(6, "c3", std::nullopt, std::nullopt, "python3 " + state_name('T'), 0);
  CHECK(a.text == "not answering: python3 T (stopped)");
  a = describe(6, "c3", std::nullopt, std::nullopt, "python3 S (sleeping)", 0,
               "signal 41 not caught by pid 77; no stack taken");
  CHECK(a.text == "not in jobkit: python3 S (sleeping) (signal 41 not caught by pid 77; no stack taken)");
  a = describe(6, "c3", in_call, std::nullopt, "python3 " + state_name('T'), 0);
  CHECK(a.text == "not answering: python3 T (stopped), in barrier at train.py:31");
  CHECK(a.seconds == -1);
  const auto line = format_answer(describe(2, "c1", in_call, std::nullopt, "", 43'500'000'000));
  CHECK(line == "2\tc1\t42\t7\tin barrier at train.py:31\n");
  const auto back = parse_answer(line.substr(0, line.size() - 1));
  REQUIRE(back);
  CHECK(back->rank == 2);
  CHECK(back->host == "c1");
  CHECK(back->seconds == 42);
  CHECK(back->text == "in barrier at train.py:31");
  CHECK_FALSE(parse_answer("x\tc1\t1\t0\ttext"));
  CHECK_FALSE(parse_answer("1\tc1\t-2\t0\ttext"));
  CHECK_FALSE(parse_answer("1\t\t1\t0\ttext"));
  CHECK_FALSE(parse_answer("1\tc1\t1\t0"));
  CHECK_FALSE(parse_answer("16777216\tc1\t1\t0\ttext"));  // no step has so many ranks
  CHECK_FALSE(parse_answer("1\tc1\t1\t44444444\ttext"));
}

TEST_CASE("the folded report: ranks by answer, whom a world call waits for, nodes that did not answer") {
  std::string agents;
  for (int r : {0, 1, 2, 3, 4})
    agents += std::to_string(r) + "\tc1\t" + std::to_string(40 + r % 2) + "\t7\tin barrier at hang.py:22\n";
  agents += "#node c1 5\n";
  agents += "5\tc2\t-1\t0\tnot in jobkit: load_shard hang.py:5 <- train_step hang.py:9\n#node c2 1\n";
  agents += "6\tc3\t41\t7\tin barrier at hang.py:22\n";
  agents += "6\tc3\t1\t7\tanother answer for rank 6 is ignored\n";
  agents += "garbage line\n";
  const auto report = fold_report(agents, {"c1", "c2", "c3", "c4"});
  CHECK(report ==
        "[rank: 0-4,6] in barrier at hang.py:22 for 40-41 s, waiting for rank 5 (c2)\n"
        "[rank: 5] not in jobkit: load_shard hang.py:5 <- train_step hang.py:9\n"
        "[node: c3] not answering\n"
        "[node: c4] not answering\n");
  // Straggler scores: a block after the ranks' lines, one line per node in the order of its first
  // rank; a malformed score line and a second one for a rank are ignored.
  std::string scored = "0\tc1\t2\t4\tin barrier at x.py:3\n#score 0 c1 1.000 0.750 40\n";
  scored += "2\tc2\t2\t4\tin barrier at x.py:3\n#score 2 c2 0.483 0.750 40\n#score 2 c2 1.000 0.750 40\n";
  scored += "1\tc1\t2\t4\tin barrier at x.py:3\n#score 1 c1 0.998 0.750 40\n#node c1 2\n";
  scored += "3\tc2\t2\t4\tin barrier at x.py:3\n#score 3 c2 1.02 0.750 60\n#score 4 c2 x 0.75 1\n";
  scored += "#score 4 c2 -1 0.75 1\n#score 4 c2 1 0.75\n#node c2 2\n";
  CHECK(fold_report(scored, {"c1", "c2"}) ==
        "[rank: 0-3] in barrier at x.py:3 for 2 s\n"
        "straggler scores (a rank's median compute time per step against the median of all ranks'; below 0.75: a "
        "straggler), at stop agreement 40-60:\n"
        "  c1: rank 0 1.00, rank 1 1.00\n"
        "  c2: rank 2 0.48 (straggler), rank 3 1.02\n");
  // Past 64 scored ranks: the stragglers one by one, the others as one range.
  std::string many;
  for (int r = 0; r < 100; ++r) {
    const auto host = "c" + std::to_string(1 + r / 50);
    many += std::to_string(r) + "\t" + host + "\t1\t100\tin barrier at x.py:3\n#score " + std::to_string(r) + " " +
            host +
            (r == 70  ? " 0.400"
             : r == 3 ? " 0.970"
                      : " 1.010") +
            " 0.750 20\n";
  }
  many += "#node c1 50\n#node c2 50\n";
  CHECK(fold_report(many, {"c1", "c2"}) ==
        "[rank: 0-99] in barrier at x.py:3 for 1 s\n"
        "straggler scores (a rank's median compute time per step against the median of all ranks'; below 0.75: a "
        "straggler), at stop agreement 20:\n"
        "  rank 70 (c2) 0.40 (straggler)\n"
        "  ranks 0-69,71-99: 0.97-1.01\n");
  // A group smaller than the world: no one is named as awaited.
  CHECK(fold_report("0\tc1\t3\t2\tin all_reduce at x.cpp:9\n1\tc1\t3\t2\tin all_reduce at x.cpp:9\n"
                    "2\tc1\t5\t4\tin barrier at x.cpp:5\n3\tc1\t5\t4\tin barrier at x.cpp:5\n#node c1 4\n",
                    {"c1"}) ==
        "[rank: 0-1] in all_reduce at x.cpp:9 for 3 s\n[rank: 2-3] in barrier at x.cpp:5 for 5 s, waiting for ranks "
        "0-1 (c1, c1)\n");
}

TEST_CASE("the stack signal: JOBKIT_WHERE_SIGNAL, else SIGRTMIN+6") {
  using jobkit::detail::map_environment;
  CHECK(stack_signal_in(map_environment{}) == SIGRTMIN + 6);
  CHECK(stack_signal_in(map_environment{{"JOBKIT_WHERE_SIGNAL", "40"}}) == 40);
  for (const char* bad : {"many", "0", "-3", "40 ", "999", ""}) {
    CHECK(stack_signal_in(map_environment{{"JOBKIT_WHERE_SIGNAL", bad}}) == SIGRTMIN + 6);
  }
}

TEST_CASE("the one rule of whether jobkit where is on: in a Slurm step, unless JOBKIT_WHERE=0") {
  using jobkit::detail::map_environment;
  CHECK(enabled_in(map_environment{{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"}}));
  CHECK(enabled_in(map_environment{{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"}, {"JOBKIT_WHERE", "1"}}));
  CHECK_FALSE(enabled_in(map_environment{{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"}, {"JOBKIT_WHERE", "0"}}));
  CHECK_FALSE(enabled_in(map_environment{{"SLURM_JOB_ID", "7"}}));  // the batch script: no step to ask about
  CHECK_FALSE(enabled_in(map_environment{{"SLURM_STEP_ID", "0"}}));
  CHECK_FALSE(enabled_in(map_environment{}));
}

TEST_CASE("what the agent reads in /proc: a step's processes, their state, the signals they catch") {
  using namespace std::string_literals;
  const auto env = "HOME=/root\0SLURM_JOB_ID=77\0SLURM_STEP_ID=0\0SLURMD_NODENAME=c2\0SLURM_PROCID=5\0"s;
  CHECK(rank_in_step(env, "77", "0", "c2") == 5);
  CHECK_FALSE(rank_in_step(env, "77", "0", "c1"));  // another node's (one process namespace)
  CHECK_FALSE(rank_in_step(env, "77", "1", "c2"));  // another step's
  CHECK_FALSE(rank_in_step(env, "7", "0", "c2"));   // SLURM_JOB_ID=77 is not job 7
  CHECK_FALSE(rank_in_step("SLURM_JOB_ID=77\0SLURM_STEP_ID=0\0SLURMD_NODENAME=c2\0SLURM_PROCID=x"s, "77", "0", "c2"));
  CHECK_FALSE(rank_in_step("", "77", "0", "c2"));

  const auto stat = parse_stat("4242 (python3 (a) b) S 4200 4242 0 0 -1");
  REQUIRE(stat);
  CHECK(stat->name == "python3 (a) b");
  CHECK(stat->state == 'S');
  CHECK(stat->ppid == 4200);
  CHECK(state_text(stat, "hrtimer_nanosleep") == "python3 (a) b S (sleeping) in hrtimer_nanosleep");
  CHECK(state_text(stat, "0") == "python3 (a) b S (sleeping)");
  CHECK(state_text(std::nullopt, "") == "gone");
  CHECK_FALSE(parse_stat("4242 (python3"));
  CHECK_FALSE(parse_stat("4242 (x)"));
  CHECK_FALSE(parse_stat(""));
  CHECK(parse_stat("1 (x) R")->ppid == 0);

  // SigCgt: a hex mask, bit N-1 for signal N (here 2, 10, 15, 17 and 41).
  const std::string status = "Name:\tpython3\nSigBlk:\t0000000000000000\nSigCgt:\t0000010000014202\nCapInh:\t0\n";
  CHECK(catches(status, 2) == true);
  CHECK(catches(status, 10) == true);
  CHECK(catches(status, 15) == true);
  CHECK(catches(status, 17) == true);
  CHECK(catches(status, 41) == true);
  CHECK(catches(status, 40) == false);
  CHECK(catches(status, 1) == false);
  CHECK(catches(status, 64) == false);
  CHECK(catches(status, 65) == false);  // past the mask
  CHECK(catches(status, 0) == false);
  CHECK(catches("SigCgt:\tF\n", 4) == true);                // at the start, and a short mask
  CHECK(catches("SigCgt:\t0000010000014202", 41) == true);  // no newline at the end
  // Hostile or broken text: no answer, never an exception.
  for (const std::string& bad : std::vector<std::string>{
           "", "SigCgt:", "SigCgt:\t\n", "SigCgt:\tzz\n", "SigCgt:\t12 34\n", "XSigCgt:\t1\n", "Name: SigCgt:\t1\n",
           "SigCgt:\t" + std::string(65, 'f') + "\n", std::string(1 << 16, '\n')}) {
    CHECK_FALSE(catches(bad, 41));
  }
  CHECK(catches("SigCgt:\t" + std::string(64, 'f') + "\n", 256) == true);

  CHECK(parse_fd_target("/memfd:jobkit-where (deleted)").kind == fd_target::record);
  auto stack = parse_fd_target("/memfd:jobkit-where-stack:41 (deleted)");
  CHECK(stack.kind == fd_target::stack);
  CHECK(stack.signal == 41);
  stack = parse_fd_target("/memfd:jobkit-where-stack (deleted)");  // an older jobkit's: no signal named
  CHECK(stack.kind == fd_target::stack);
  CHECK_FALSE(stack.signal);
  CHECK_FALSE(parse_fd_target("/memfd:jobkit-where-stack:999 (deleted)").signal);
  CHECK_FALSE(parse_fd_target("/memfd:jobkit-where-stack:0 (deleted)").signal);
  CHECK_FALSE(parse_fd_target("/memfd:jobkit-where-stack:4x (deleted)").signal);
  CHECK(parse_fd_target("/memfd:jobkit-where-stackx (deleted)").kind == fd_target::other);
  CHECK(parse_fd_target("/memfd:jobkit-wherex (deleted)").kind == fd_target::other);
  CHECK(parse_fd_target("/tmp/jobkit-where").kind == fd_target::other);
  CHECK(parse_fd_target("").kind == fd_target::other);
  CHECK(proc_state(::getpid()).find(" R (running)") != std::string::npos);
  CHECK(proc_state(999999999) == "gone");
}

TEST_CASE("a Python rank is sent only the signal it registered, and only while it catches it") {
  const std::string catches_41 = "SigCgt:\t0000010000000000\n";
  auto plan = plan_stack(77, 41, catches_41);
  CHECK(plan.signal == 41);
  CHECK(plan.refused.empty());
  // Registered 41 but no longer catches it (its own code set SIG_DFL since): a real-time signal
  // it does not catch would end it.
  plan = plan_stack(77, 41, "SigCgt:\t0000000000000000\n");
  CHECK(plan.signal == 0);
  CHECK(plan.refused == "signal 41 not caught by pid 77; no stack taken");
  plan = plan_stack(77, 40, catches_41);  // another signal than the one it catches
  CHECK(plan.signal == 0);
  CHECK(plan.refused == "signal 40 not caught by pid 77; no stack taken");
  plan = plan_stack(77, std::nullopt, catches_41);  // an older jobkit's stack file names none
  CHECK(plan.signal == 0);
  CHECK(plan.refused == "pid 77's stack file names no signal; no stack taken");
  plan = plan_stack(77, 41, "");  // the process ended meanwhile, or a status without a mask
  CHECK(plan.signal == 0);
  CHECK(plan.refused == "no signal mask in pid 77's /proc status; no stack taken");

  // This process, for real: it catches a signal once a handler is installed.
  const int signal = SIGRTMIN + 7;
  const auto own = [] { return read_small_file("/proc/self/status", 16384); };
  struct sigaction previous {};
  REQUIRE(::sigaction(signal, nullptr, &previous) == 0);
  CHECK(plan_stack(::getpid(), signal, own()).signal == 0);
  struct sigaction handler {};
  handler.sa_handler = [](int) {};
  REQUIRE(::sigaction(signal, &handler, nullptr) == 0);
  CHECK(plan_stack(::getpid(), signal, own()).signal == signal);
  REQUIRE(::sigaction(signal, &previous, nullptr) == 0);
}

TEST_CASE("the step's own report: when, in what environment, and what it logs") {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  CHECK(report_after_rule(std::nullopt, seconds(80)) == seconds(20));  // a quarter of the deadline
  CHECK(report_after_rule(std::nullopt, seconds(1800)) == seconds(450));
  CHECK(report_after_rule(std::nullopt, seconds(20)) == seconds(10));      // but at least 10 s
  CHECK(report_after_rule(std::nullopt, seconds(10)) == milliseconds(0));  // never at or past the deadline
  CHECK(report_after_rule("5", seconds(80)) == seconds(5));
  CHECK(report_after_rule("2.5", seconds(80)) == milliseconds(2500));
  CHECK(report_after_rule("0", seconds(80)) == milliseconds(0));
  CHECK(report_after_rule("90", seconds(80)) == milliseconds(0));
  try {
    (void)report_after_rule("soon", seconds(80));
    FAIL("a malformed JOBKIT_WHERE_REPORT_AFTER was taken");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_environment);
    CHECK(std::string(e.what()).find("JOBKIT_WHERE_REPORT_AFTER='soon'") != std::string::npos);
  }

  std::vector<std::string> variables = {
      "PATH=/usr/bin", "SLURM_CONF=/etc/slurm.conf", "SLURM_STEP_ID=3", "SLURM_NTASKS=7", "PMIX_RANK=2",
      "PMI_FD=5",      "SLURMD_NODENAME=c1",         "HOME=/root"};
  std::vector<char*> pointers;
  for (auto& v : variables) pointers.push_back(v.data());
  pointers.push_back(nullptr);
  CHECK(report_environment(pointers.data()) ==
        std::vector<std::string>{"PATH=/usr/bin", "SLURM_CONF=/etc/slurm.conf", "SLURMD_NODENAME=c1", "HOME=/root"});

  CHECK(report_text(0, "barrier", "hang.py:10", 20, "77.0", 0,
                    "step 77.0 on c[1-3]:\n[rank: 0-4,6] in barrier at hang.py:10 for 20 s\n", "") ==
        "[rank: 0] WARNING: barrier at hang.py:10 has waited 20 s; where every rank is (jobkit where 77.0):\n"
        "  step 77.0 on c[1-3]:\n"
        "  [rank: 0-4,6] in barrier at hang.py:10 for 20 s\n");
  CHECK(report_text(4, "barrier", "t.cpp:1", 12, "77.0", 127, "", "No such file or directory") ==
        "[rank: 4] WARNING: barrier at t.cpp:1 has waited 12 s; cannot say where every rank is: could not start "
        "jobkit (No such file or directory; the jobkit command: JOBKIT_CLI, else jobkit on PATH)\n");
  CHECK(report_text(0, "barrier", "t.cpp:1", 12, "77.0", 2, "", "where: step 77.0 is not running\n") ==
        "[rank: 0] WARNING: barrier at t.cpp:1 has waited 12 s; cannot say where every rank is: jobkit where 77.0 "
        "failed (exit status 2): where: step 77.0 is not running\n");
}

TEST_CASE("the step's own report: a thread runs jobkit where once per watched call past its threshold") {
  // A stand-in for the jobkit command: it says what it was asked and what it was told.
  char dir_template[] = "/tmp/jobkit-watch-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  const std::string program = dir + "/jobkit";
  {
    std::FILE* f = std::fopen(program.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(
        "#!/bin/sh\n"
        "echo \"step $2 on c1: asked $1 $2 $3 $4\"\n"
        "echo \"[rank: 0] in barrier, SLURM_STEP_ID=${SLURM_STEP_ID:-unset} PMIX_RANK=${PMIX_RANK:-unset}\"\n",
        f);
    std::fclose(f);
    ::chmod(program.c_str(), 0755);
  }
  ::setenv("SLURM_JOB_ID", "990001", 1);
  ::setenv("SLURM_STEP_ID", "4", 1);
  ::setenv("PMIX_RANK", "0", 1);
  ::setenv("JOBKIT_CLI", program.c_str(), 1);
  const std::string log = dir + "/stderr";
  const int saved = ::dup(2);
  const int file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(file >= 0);
  ::dup2(file, 2);
  // A call that lasts `lasting`, watched as its group's rank 0 asks (a call of another group rank
  // asks with report_after zero: src/collectives/group.cpp).
  auto call_for = [](const watched_call& call, std::chrono::milliseconds lasting) {
    const watch_scope scope(call);
    std::this_thread::sleep_for(lasting);
  };
  // A call not watched never reports; a watched one reports once, after the threshold, and not before it.
  using std::chrono::milliseconds;
  call_for({.call = "all_gather", .site = "a.cpp:1", .rank = 5, .report_after = milliseconds(0)}, milliseconds(1500));
  call_for({.call = "barrier", .site = "hang.cpp:9", .rank = 2, .report_after = milliseconds(500)}, milliseconds(4500));
  call_for({.call = "barrier", .site = "hang.cpp:12", .rank = 2, .report_after = std::chrono::seconds(60)},
           milliseconds(1500));
  // Two threads in watched calls at once: the one that ends first takes nothing from the other,
  // which still reports past its threshold.
  {
    std::thread other([&] {
      call_for({.call = "all_reduce", .site = "t2.cpp:7", .rank = 2, .report_after = milliseconds(500)},
               milliseconds(3500));
    });
    call_for({.call = "broadcast", .site = "t1.cpp:3", .rank = 2, .report_after = std::chrono::seconds(60)},
             milliseconds(100));
    other.join();
  }
  ::dup2(saved, 2);
  ::close(saved);
  ::close(file);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(text.starts_with("[rank: 2] WARNING: barrier at hang.cpp:9 has waited "));
  CHECK(text.find("s; where every rank is (jobkit where 990001.4):\n"
                  "  step 990001.4 on c1: asked where 990001.4 --timeout 10\n"
                  "  [rank: 0] in barrier, SLURM_STEP_ID=unset PMIX_RANK=unset\n") != std::string::npos);
  const auto second = text.find("[rank: 2] WARNING: all_reduce at t2.cpp:7 has waited ");
  CHECK(second != std::string::npos);
  CHECK(text.find("has waited", text.find("has waited", second) + 1) == std::string::npos);  // once each
  CHECK(text.find("a.cpp:1") == std::string::npos);
  CHECK(text.find("hang.cpp:12") == std::string::npos);
  CHECK(text.find("t1.cpp:3") == std::string::npos);
  ::unsetenv("JOBKIT_CLI");
  ::unsetenv("PMIX_RANK");
  ::unsetenv("SLURM_STEP_ID");
  std::filesystem::remove_all(dir);
}

// --- the record under threads and fork ----------------------------------------------------------

namespace {

/// A thread in a call until told to leave it.
class call_on_thread {
 public:
  explicit call_on_thread(call_info info) {
    thread_ = std::thread([this, info] {
      const call_scope scope(info);
      {
        std::unique_lock lock(mutex_);
        in_ = true;
        changed_.notify_all();
        changed_.wait(lock, [&] { return leave_; });
      }
    });
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return in_; });
  }
  void leave() {
    {
      const std::lock_guard lock(mutex_);
      leave_ = true;
      changed_.notify_all();
    }
    thread_.join();
  }
  ~call_on_thread() {
    if (thread_.joinable()) leave();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool in_ = false;
  bool leave_ = false;
  std::thread thread_;
};

std::string own_record() { return find_files(::getpid()).record; }

}  // namespace

TEST_CASE("the record under threads: each call is its own and a finished one is not shown in progress") {
  ::setenv("SLURM_JOB_ID", "990001", 1);
  ::setenv("SLURM_STEP_ID", "4", 1);
  std::optional<call_scope> barrier;
  barrier.emplace(call_info{.call = "barrier", .site = "a.py:1", .rank = 3, .group_size = 8});
  call_on_thread gather({.call = "all_gather", .site = "b.py:2", .rank = 3, .group_size = 2});
  const auto path = own_record();
  REQUIRE(!path.empty());
  auto seen = read_record(path);
  REQUIRE(seen);
  CHECK(seen->in_call);
  CHECK(seen->call == "barrier");  // the oldest call in progress
  barrier.reset();                 // the barrier ended; the other thread's all_gather goes on
  seen = read_record(path);
  REQUIRE(seen);
  CHECK(seen->in_call);
  CHECK(seen->call == "all_gather");
  CHECK(seen->site == "b.py:2");
  CHECK(seen->group_size == 2);
  gather.leave();
  seen = read_record(path);
  REQUIRE(seen);
  CHECK_FALSE(seen->in_call);
  CHECK(seen->last_call == "all_gather");
  CHECK(seen->last_site == "b.py:2");
}

TEST_CASE("the record under threads: many threads entering and leaving at once leave it readable and whole") {
  ::setenv("SLURM_JOB_ID", "990001", 1);
  ::setenv("SLURM_STEP_ID", "4", 1);
  { const call_scope first({.call = "barrier", .site = "first.py:1", .rank = 0, .group_size = 1}); }
  const auto path = own_record();
  REQUIRE(!path.empty());
  constexpr int threads = 6;
  constexpr int calls = 200000;
  std::atomic<int> running{threads};
  std::atomic<int> torn{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t) {
    callers.emplace_back([&, t] {
      const std::string call = "call" + std::to_string(t);
      const std::string site = "site" + std::to_string(t) + ".py:" + std::to_string(t);
      for (int i = 0; i < calls; ++i) {
        const call_scope scope({.call = call, .site = site, .rank = 0, .group_size = t + 1});
      }
      running.fetch_sub(1);
    });
  }
  // A reader beside them, as `jobkit where` reads: every view it gets is one call's, never a mix.
  while (running.load() > 0) {
    const auto v = read_record(path);
    if (!v) continue;  // it kept changing: written millions of times a second
    // One call's name and site (and group size, in progress), or the first call's.
    const auto whole = [](const std::string& call, const std::string& site, std::optional<int> size) {
      if (!call.starts_with("call")) return call == "barrier" && site == "first.py:1";
      const auto t = call.substr(4);
      return t.size() == 1 && site == "site" + t + ".py:" + t && (!size || *size == t[0] - '0' + 1);
    };
    if (v->in_call && !whole(v->call, v->site, v->group_size)) torn.fetch_add(1);
    if (!v->last_call.empty() && !whole(v->last_call, v->last_site, std::nullopt)) torn.fetch_add(1);
  }
  for (auto& c : callers) c.join();
  CHECK(torn.load() == 0);
  const auto after = read_record(path);
  REQUIRE(after);  // the sequence count is even again: the record is not "not in jobkit" for good
  CHECK_FALSE(after->in_call);
  CHECK(after->last_call.starts_with("call"));
}

TEST_CASE("the record across fork: the child keeps its own calls and never the parent's") {
  ::setenv("SLURM_JOB_ID", "990001", 1);
  ::setenv("SLURM_STEP_ID", "4", 1);
  std::optional<call_scope> barrier;
  barrier.emplace(call_info{.call = "barrier", .site = "parent.py:1", .rank = 2, .group_size = 4});
  call_on_thread gather({.call = "all_gather", .site = "parent.py:2", .rank = 2, .group_size = 4});
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The parent's two calls go on in the parent only; the forking thread's scope ends here
    // without touching anything.
    int status = 0;
    barrier.reset();
    if (!own_record().empty()) status |= 1;  // the parent's record is not the child's
    {
      const call_scope mine({.call = "broadcast", .site = "child.py:3", .rank = 2, .group_size = 4});
      const auto path = own_record();
      const auto v = path.empty() ? std::nullopt : read_record(path);
      if (!v || !v->in_call || v->call != "broadcast" || v->pid != ::getpid()) status |= 2;
    }
    const auto path = own_record();
    const auto v = path.empty() ? std::nullopt : read_record(path);
    if (!v || v->in_call || v->last_call != "broadcast") status |= 4;
    ::_exit(status);
  }
  int status = -1;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The parent's record still has its own calls.
  const auto v = read_record(own_record());
  REQUIRE(v);
  CHECK(v->in_call);
  CHECK(v->call == "barrier");
  CHECK(v->pid == ::getpid());
}
