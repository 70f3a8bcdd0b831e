// `jobkit where`'s parts without a cluster (src/where): the record a process keeps of its jobkit
// call, the Python stack read from faulthandler's dump, one rank's answer and the folded report.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "../catch.hpp"
#include "where/record.hpp"
#include "where/report.hpp"

using namespace jobkit::where;

TEST_CASE("a process's record: the call in progress, then the last one that ended") {
  // The record is made at the first call, in a Slurm job; found through /proc/PID/fd.
  ::setenv("SLURM_JOB_ID", "990001", 1);
  CHECK(find_files(::getpid()).record.empty());
  {
    const call_scope outer("barrier", "train.py:31", 3, 8);
    {
      const call_scope inner("all_gather", "helpers.cpp:10", 3, 8);  // a call inside a call
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
  enter(std::string(100, 'c'), long_site, 0, 1);  // names past their room are cut
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
