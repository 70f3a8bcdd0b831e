// jobkit run's decisions (src/recovery/plan) and ledger (src/recovery/ledger), and the events a
// step writes for it (src/recovery/events), on the lines jobkit and srun really print.
#include <set>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "core/environment.hpp"
#include "fold/srun_options.hpp"
#include "jobkit/error.hpp"
#include "recovery/events.hpp"
#include "recovery/ledger.hpp"
#include "recovery/plan.hpp"

using namespace jobkit::detail;

TEST_CASE("evidence: jobkit's lost-node verdicts, named by the most nodes, blame that node") {
  step_evidence e;
  e.add_line(
      "  0: jobkit: barrier at loop.cpp:12: its node c3 answered nothing for 8 s (JOBKIT_LOST_NODE_TIMEOUT): "
      "the node is lost or cut off from c1 (ranks on c3 in this group: 4, 5)");
  e.add_line(
      "  2: jobkit: barrier: its node c3 answered nothing for 8 s (JOBKIT_LOST_NODE_TIMEOUT): the node is lost "
      "or cut off from c2");
  // The lost node's own ranks, cut off, name the node they lost: one accuser only.
  e.add_line(
      "  4: jobkit: barrier: its node c1 answered nothing for 8 s (JOBKIT_LOST_NODE_TIMEOUT): the node is lost "
      "or cut off from c3");
  REQUIRE(e.lost.size() == 2);
  CHECK(e.lost["c3"] == std::set<std::string>{"c1", "c2"});
  // c1 and c2 named c3, c3 named c1: a partition; the larger side wins.
  const auto b = lost_nodes_of(e);
  REQUIRE(b.size() == 1);
  CHECK(b[0].node == "c3");
  CHECK(b[0].why.find("c1, c2") != std::string::npos);
}

TEST_CASE("evidence: two nodes lost at once are both blamed; a two-node partition blames neither") {
  step_evidence two;
  two.add_line("jobkit: x: its node c2 answered nothing: the node is lost or cut off from c1");
  two.add_line("jobkit: x: its node c3 answered nothing: the node is lost or cut off from c1");
  const auto b = lost_nodes_of(two);
  REQUIRE(b.size() == 2);
  CHECK(b[0].node == "c2");
  CHECK(b[1].node == "c3");
  step_evidence e;
  e.add_line("jobkit: x: its node c1 answered nothing: the node is lost or cut off from c2");
  e.add_line("jobkit: x: its node c2 answered nothing: the node is lost or cut off from c1");
  CHECK(lost_nodes_of(e).empty());
}

TEST_CASE("evidence: a dead rank's node, from the survivors, else from srun's first failed task") {
  step_evidence e;
  e.add_line(
      "1: jobkit: barrier: rank 3 (c2) closed its connection (end of stream) during barrier: the process died "
      "or exited");
  e.add_line("srun: error: c1: tasks 0-2: Killed");
  e.add_line("srun: error: c2: task 3: Killed");
  CHECK(e.failed_tasks == std::vector<std::string>{"c1", "c2"});
  CHECK(crash_node(e) == "c2");
  step_evidence only_srun;
  only_srun.add_line("srun: error: c3: task 5: Exited with exit code 9");
  only_srun.add_line("srun: error: c1: tasks 0-4: Terminated");
  CHECK(crash_node(only_srun) == "c3");
  step_evidence nothing;
  nothing.add_line("rank 3 (c2) says hello");
  nothing.add_line("srun: error: Unable to create step for job 7: Requested node configuration is not available");
  CHECK(crash_node(nothing).empty());
  CHECK(nothing.failed_tasks.empty());
}

TEST_CASE("evidence: a node where srun could not start the step is blamed at once") {
  step_evidence e;
  e.add_line("srun: error: Task launch for StepId=2.0 failed on node c3: Communication connection failure");
  e.add_line("srun: error: Application launch failed: Communication connection failure");
  e.add_line("srun: Job step aborted");
  CHECK(e.launch_failed == std::set<std::string>{"c3"});
  CHECK(e.failed_tasks.empty());
  const auto b = unlaunched_nodes_of(e);
  REQUIRE(b.size() == 1);
  CHECK(b[0].node == "c3");
  CHECK(b[0].why.find("could not start") != std::string::npos);
  step_evidence labelled;
  labelled.add_line("  0: srun: error: Task launch for StepId=9.3 failed on node node-17: Zero Bytes were transmitted");
  CHECK(labelled.launch_failed == std::set<std::string>{"node-17"});
  step_evidence broken;
  broken.add_line("srun: error: Task launch for StepId=2.0 failed on node : x");
  broken.add_line("srun: error: Task launch for StepId=2.0 failed");
  CHECK(broken.launch_failed.empty());
  CHECK(unlaunched_nodes_of(broken).empty());
}

TEST_CASE("evidence: hostile lines stay bounded") {
  step_evidence e;
  const std::string huge(1 << 20, 'x');
  e.add_line(huge);
  for (int i = 0; i < 10000; ++i) {
    e.add_line("jobkit: its node n" + std::to_string(i) + " answered nothing: the node is lost or cut off from a");
  }
  CHECK(e.lost.size() <= evidence_node_limit);
}

TEST_CASE("a crash blames a node only when it repeats there") {
  CHECK_FALSE(repeated_crash({"c1", "c2", "c3"}));
  const auto b = repeated_crash({"c1", "c2", "c1"});
  REQUIRE(b);
  CHECK(b->node == "c1");
  CHECK_FALSE(repeated_crash({"", ""}));
}

TEST_CASE("Slurm's states that make a node unusable") {
  for (const char* bad : {"down", "down*", "drained", "draining", "drain", "fail", "failing", "idle*", "mixed*"}) {
    CHECK(slurm_state_is_bad(bad));
  }
  for (const char* good : {"idle", "mixed", "allocated", "completing"}) CHECK_FALSE(slurm_state_is_bad(good));
}

TEST_CASE("the record of bad nodes: written and read back; a broken one read as far as it holds") {
  const std::vector<bad_node> nodes{{"c3", 1764638400, "lost: named by c1, c2"}, {"gpu-07", 12, "tab\there"}};
  const auto text = format_bad_nodes(nodes);
  const auto back = parse_bad_nodes(text);
  REQUIRE(back.size() == 2);
  CHECK(back[0].node == "c3");
  CHECK(back[0].when == 1764638400);
  CHECK(back[1].why == "tab here");
  CHECK(parse_bad_nodes("garbage\nc1\tnotanumber\twhy\n\tc2\t3\n c4\t5\tx\nc5\t6\tok\nc5\t7\tagain\n").size() == 1);
}

TEST_CASE("the next step's nodes: the allocation's order, bad ones left out") {
  const std::vector<std::string> allocation{"c1", "c2", "c3", "c4"};
  CHECK(choose_nodes(allocation, {}, 3) == std::vector<std::string>{"c1", "c2", "c3"});
  CHECK(choose_nodes(allocation, {"c2"}, 3) == std::vector<std::string>{"c1", "c3", "c4"});
  CHECK(choose_nodes(allocation, {"c2", "c4"}, 3) == std::vector<std::string>{"c1", "c3"});
}

TEST_CASE("no progress: K restarts in a row without the newest checkpoint advancing") {
  CHECK_FALSE(no_progress({40}, 3));
  CHECK_FALSE(no_progress({40, 40, 40}, 3));
  CHECK(no_progress({40, 40, 40, 40}, 3));
  CHECK_FALSE(no_progress({30, 40, 40, 40}, 3));
  CHECK(no_progress({-1, -1, -1, -1}, 3));
  CHECK_FALSE(no_progress({40, 40, 40, 40}, 0));
  CHECK(no_progress({40, 40}, 1));
}

TEST_CASE("srun's placement options are found as srun reads them") {
  using jobkit::fold::srun_options_given;
  const std::vector<std::string_view> args{"--mpi=pmix", "-lN3", "--nodelist", "c1", "prog", "-w", "x"};
  CHECK(srun_options_given(args, {"N", "nodes", "w", "nodelist"}) == std::vector<std::string>{"-N", "--nodelist"});
  CHECK(srun_options_given({"--ntasks-per-node=2", "prog", "-N", "3"}, {"N", "nodes"}).empty());
}

TEST_CASE("events: settings from the environment, one line each, parsed back") {
  map_environment none;
  CHECK_FALSE(recovery_settings_from(none));
  map_environment env(
      {{"JOBKIT_RECOVERY_DIR", "/shared/ck/.jobkit-run-7"}, {"JOBKIT_RECOVERY_ATTEMPT", "3"}, {"SLURM_STEP_ID", "4"}});
  const auto settings = recovery_settings_from(env);
  REQUIRE(settings);
  CHECK(settings->attempt == 3);
  const auto line = event_line("hang", *settings, 5, "c2", 1764638400.25, R"("idle_s":12.5)");
  const auto e = parse_event(line);
  REQUIRE(e);
  CHECK(e->kind == "hang");
  CHECK(e->attempt == 3);
  CHECK(e->rank == 5);
  CHECK(e->host == "c2");
  CHECK(json_text_field(e->line, "step") == "4");
  CHECK(json_field(e->line, "idle_s") == "12.5");
  const std::string straggler =
      R"({"event":"straggler","stragglers":[{"rank":4,"host":"c3","score":0.5}],"scores":[1.0,[2],"]"]})";
  CHECK(json_array_field(straggler, "stragglers") == R"([{"rank":4,"host":"c3","score":0.5}])");
  CHECK(json_array_field(straggler, "scores") == R"([1.0,[2],"]"])");
  CHECK(json_array_field(R"({"scores":[1.0,2)", "scores").empty());
  map_environment bad({{"JOBKIT_RECOVERY_DIR", "/x"}, {"JOBKIT_RECOVERY_ATTEMPT", "-1"}});
  CHECK_THROWS_WITH(recovery_settings_from(bad), Catch::Contains("JOBKIT_RECOVERY_ATTEMPT='-1'"));
  CHECK_FALSE(parse_event("not json"));
  CHECK_FALSE(parse_event(R"({"event":"x","attempt":-4,"rank":0,"time":5})"));
}

TEST_CASE("the ledger: a restart's phases, the run's badput and effective training time ratio") {
  restart_entry r;
  r.number = 1;
  r.attempt = 0;
  r.cause = "lost node";
  r.where = "c3";
  r.blamed = "c3";
  r.blame_why = "lost";
  r.nodes = {"c1", "c2", "c4"};
  r.checkpoint = 40;
  r.wasted = 0.5;
  r.at = {100.0, 101.0, 101.5, 102.0, 102.25, 103.0};
  const auto json = restart_json("7", r);
  CHECK(json.find(R"("failure_to_first_step_done":3.000)") != std::string::npos);
  CHECK(json.find(R"("infrastructure recovery from disruption":1.500)") != std::string::npos);
  CHECK(restart_line(r).find("restart 1: attempt 0: lost node on c3 (c3 blamed: lost), resuming from checkpoint 40") !=
        std::string::npos);
  job_ledger l{"7", 50.0, 150.0, "finished", {r}, 80.0};
  const auto run = run_json(l);
  CHECK(run.find(R"("effective_training_time_ratio":0.8000)") != std::string::npos);
  CHECK(ledger_summary(l).find("finished after 1 restart(s) in 100.0 s") != std::string::npos);
}

TEST_CASE("scontrol's KEY=VALUE output: whole keys only, slurmd addresses, the pre-emption time") {
  using namespace jobkit::detail;
  const std::string line = "NodeName=c2 Arch=x86_64 NodeAddr=198.18.0.2 NodeHostName=c2 Port=6819 XPort=1";
  CHECK(scontrol_field(line, "NodeName") == "c2");
  CHECK(scontrol_field(line, "Port") == "6819");  // not XPort's
  CHECK(scontrol_field(line, "Addr").empty());    // only a whole key
  CHECK(scontrol_field(line, "Missing").empty());
  CHECK(scontrol_field("", "Port").empty());
  const auto found = slurmd_addresses(line + "\nNodeName=c3 NodeAddr=c3 Port=99999\nNodeName=c4 NodeAddr=x Port=0\n" +
                                      "NodeName=c5 Port=7000\nNodeName=c6 NodeAddr=10.0.0.6 Port=6820 \n");
  REQUIRE(found.size() == 2);
  CHECK(found[0].node == "c2");
  CHECK(found[0].address == "198.18.0.2");
  CHECK(found[0].port == 6819);
  CHECK(found[1].node == "c6");
  CHECK(found[1].port == 6820);
  CHECK(preempt_time_of("JobId=17 PreemptTime=2026-12-02T06:08:00 SuspendTime=None") == "2026-12-02T06:08:00");
  CHECK_FALSE(preempt_time_of("JobId=17 PreemptTime=None SuspendTime=None"));
  CHECK_FALSE(preempt_time_of("JobId=17 PreemptTime=Unknown"));
  CHECK_FALSE(preempt_time_of("JobId=17 SuspendTime=None"));
  CHECK_FALSE(preempt_time_of("JobId=17 PreemptTime=" + std::string(65, '1')));
}
