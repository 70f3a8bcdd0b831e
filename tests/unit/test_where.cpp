// `jobkit where`'s parts without a cluster (src/where): the record a process keeps of its jobkit
// call, the Python stack read from faulthandler's dump, one rank's answer and the folded report.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"
#include "where/record.hpp"
#include "where/report.hpp"
#include "where/watch.hpp"

using namespace jobkit::where;

TEST_CASE("a process's record: the call in progress, then the last one that ended") {
  // The record is made at the first call, in a Slurm job; found through /proc/PID/fd.
  ::setenv("SLURM_JOB_ID", "990001", 1);
  CHECK(find_files(::getpid()).record.empty());
  {
    const call_scope outer({.call = "barrier", .site = "train.py:31", .rank = 3, .group_rank = 1, .group_size = 8});
    {
      const call_scope inner({.call = "all_gather",
                              .site = "helpers.cpp:10",
                              .rank = 3,
                              .group_rank = 1,
                              .group_size = 8});  // a call inside a call
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
  enter({.call = long_call,
         .site = long_site,
         .rank = 0,
         .group_rank = 0,
         .group_size = 1});  // names past their room are cut
  const auto cut = read_record(path);
  REQUIRE(cut);
  CHECK(cut->call.size() == 31);
  CHECK(cut->site.size() == 127);
  leave();
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
  // A group smaller than the world: no one is named as awaited.
  CHECK(fold_report("0\tc1\t3\t2\tin all_reduce at x.cpp:9\n1\tc1\t3\t2\tin all_reduce at x.cpp:9\n"
                    "2\tc1\t5\t4\tin barrier at x.cpp:5\n3\tc1\t5\t4\tin barrier at x.cpp:5\n#node c1 4\n",
                    {"c1"}) ==
        "[rank: 0-1] in all_reduce at x.cpp:9 for 3 s\n[rank: 2-3] in barrier at x.cpp:5 for 5 s, waiting for ranks "
        "0-1 (c1, c1)\n");
}

TEST_CASE("the stack signal: JOBKIT_WHERE_SIGNAL, else SIGRTMIN+6") {
  ::unsetenv("JOBKIT_WHERE_SIGNAL");
  CHECK(python_signal() == SIGRTMIN + 6);
  ::setenv("JOBKIT_WHERE_SIGNAL", "40", 1);
  CHECK(python_signal() == 40);
  ::setenv("JOBKIT_WHERE_SIGNAL", "many", 1);
  CHECK(python_signal() == SIGRTMIN + 6);
  ::unsetenv("JOBKIT_WHERE_SIGNAL");
}

TEST_CASE("the step's own report: when, in what environment, and what it logs") {
  using jobkit::detail::report_after_rule;
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

TEST_CASE("the step's own report: group rank 0's thread runs jobkit where once per call past the threshold") {
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
  // A call that lasts `lasting`, as enter and leave record it.
  auto call_for = [](const call_info& info, std::chrono::milliseconds lasting) {
    const call_scope scope(info);
    std::this_thread::sleep_for(lasting);
  };
  // Group rank 1 never reports; group rank 0 reports once, after the threshold, and not before it.
  using std::chrono::milliseconds;
  call_for({.call = "all_gather",
            .site = "a.cpp:1",
            .rank = 5,
            .group_rank = 1,
            .group_size = 2,
            .report_after = milliseconds(100)},
           milliseconds(1500));
  call_for({.call = "barrier",
            .site = "hang.cpp:9",
            .rank = 2,
            .group_rank = 0,
            .group_size = 7,
            .report_after = milliseconds(500)},
           milliseconds(4500));
  call_for({.call = "barrier",
            .site = "hang.cpp:12",
            .rank = 2,
            .group_rank = 0,
            .group_size = 7,
            .report_after = std::chrono::seconds(60)},
           milliseconds(1500));
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
  CHECK(text.find("has waited", text.find("has waited") + 1) == std::string::npos);  // once
  CHECK(text.find("a.cpp:1") == std::string::npos);
  CHECK(text.find("hang.cpp:12") == std::string::npos);
  ::unsetenv("JOBKIT_CLI");
  ::unsetenv("PMIX_RANK");
  ::unsetenv("SLURM_STEP_ID");
  std::filesystem::remove_all(dir);
}
