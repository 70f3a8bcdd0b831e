// Identity discovery on synthetic environments: order, layouts, and every bad input.
#include "jobkit/identity.hpp"

#include <fmt/format.h>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "core/environment.hpp"
#include "core/host_list.hpp"
#include "identity/discovery.hpp"
#include "jobkit/error.hpp"
#include "support.hpp"

using jobkit::errc;
using jobkit::identity_source;
using jobkit::detail::map_environment;
using jobkit::detail::pmix_facts;
using jobkit::detail::resolve_identity;

namespace {

/// Rank 5 of an uneven step of 7 tasks laid out 4+2+1 over 3 nodes: second task of node 1.
map_environment slurm_step() {
  return {{"SLURM_JOB_ID", "42"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_STEP_NUM_TASKS", "7"},
          {"SLURM_STEP_NUM_NODES", "3"},
          {"SLURM_STEP_TASKS_PER_NODE", "4,2,1"},
          {"SLURM_PROCID", "5"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"}};
}

/// Rank 5 of torchrun with 2 nodes x 4 processes.
map_environment torchrun() {
  return {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}, {"NODE_RANK", "1"}};
}

pmix_facts pmix_rank5() {
  pmix_facts f;
  f.rank = 5;
  f.world_size = 7;
  f.local_rank = 1;
  f.local_world_size = 2;
  f.node_rank = 1;
  f.num_nodes = 3;
  f.local_peers = {4, 5};
  f.nspace = "slurm.pmix.42.3";
  return f;
}

std::string error_of(const map_environment& env, const pmix_facts* pmix = nullptr) {
  try {
    resolve_identity(env, pmix, "host");
  } catch (const jobkit::error& e) {
    return e.what();
  }
  return "(no error)";
}

using test_support::contains;

struct bad_case {
  const char* what;
  map_environment env;
  std::vector<std::string> expected;  // every part must appear in the message
};

map_environment with(map_environment env, std::initializer_list<std::pair<std::string, std::string>> set,
                     std::initializer_list<std::string> unset = {}) {
  for (const auto& [k, v] : set) env.set(k, v);
  for (const auto& k : unset) env.unset(k);
  return env;
}

}  // namespace

TEST_CASE("without a launcher the documented single-rank defaults apply", "[identity]") {
  const auto id = resolve_identity(map_environment{}, nullptr, "laptop");
  CHECK(id.rank == 0);
  CHECK(id.world_size == 1);
  CHECK(id.local_rank == 0);
  CHECK(id.local_world_size == 1);
  CHECK(id.node_rank == 0);
  CHECK(id.num_nodes == 1);
  CHECK(id.hostname == "laptop");
  CHECK(id.job_id.empty());
  CHECK(id.step_id.empty());
  CHECK(id.source == identity_source::defaults);
  CHECK(id.is_main_process());
  CHECK(id.is_local_main_process());
  CHECK_FALSE(id.is_distributed());
}

TEST_CASE("a Slurm batch step (no srun) is a single rank", "[identity]") {
  const map_environment batch = {{"SLURM_JOB_ID", "42"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"},
                                 {"SLURM_NODEID", "0"},  {"SLURM_NTASKS", "8"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}};
  const auto id = resolve_identity(batch, nullptr, "c1");
  CHECK(id.source == identity_source::defaults);
  CHECK(id.world_size == 1);
}

TEST_CASE("the Slurm step environment gives exact values for an uneven layout", "[identity]") {
  const auto id = resolve_identity(slurm_step(), nullptr, "c2");
  CHECK(id.source == identity_source::slurm);
  CHECK(id.rank == 5);
  CHECK(id.world_size == 7);
  CHECK(id.local_rank == 1);
  CHECK(id.local_world_size == 2);
  CHECK(id.node_rank == 1);
  CHECK(id.num_nodes == 3);
  CHECK(id.job_id == "42");
  CHECK(id.step_id == "3");
  CHECK_FALSE(id.is_main_process());
  CHECK_FALSE(id.is_local_main_process());
  CHECK(id.is_distributed());
}

TEST_CASE("the local world size comes from this node's entry, not rank / tasks per node", "[identity]") {
  // Cyclic distribution of 7 tasks over 3 nodes: node 2 holds ranks 2 and 5 (3+2+2 per node).
  auto env = with(
      slurm_step(),
      {{"SLURM_STEP_TASKS_PER_NODE", "3,2(x2)"}, {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"}});
  const auto id = resolve_identity(env, nullptr, "c3");
  CHECK(id.node_rank == 2);
  CHECK(id.local_world_size == 2);
  CHECK(id.local_rank == 1);
}

TEST_CASE("SLURM_STEP_TASKS_PER_NODE forms", "[identity]") {
  using jobkit::detail::parse_tasks_per_node;
  CHECK(parse_tasks_per_node("X", "1") == std::vector<int>{1});
  CHECK(parse_tasks_per_node("X", "4,2,1") == std::vector<int>{4, 2, 1});
  CHECK(parse_tasks_per_node("X", "2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(parse_tasks_per_node("X", "1(x2)") == std::vector<int>{1, 1});
  CHECK(parse_tasks_per_node("X", "8(x1),3(x2),1") == std::vector<int>{8, 3, 3, 1});
}

TEST_CASE("torchrun variables are the third source", "[identity]") {
  auto env = with(torchrun(), {{"TORCHELASTIC_RUN_ID", "run-7"}});
  const auto id = resolve_identity(env, nullptr, "h");
  CHECK(id.source == identity_source::torchrun);
  CHECK(id.rank == 5);
  CHECK(id.world_size == 8);
  CHECK(id.local_rank == 1);
  CHECK(id.local_world_size == 4);
  CHECK(id.node_rank == 1);
  CHECK(id.num_nodes == 2);
  CHECK(id.job_id == "run-7");
}

TEST_CASE("torchrun's GROUP_RANK stands for NODE_RANK", "[identity]") {
  auto env = with(torchrun(), {{"GROUP_RANK", "1"}}, {"NODE_RANK"});
  CHECK(resolve_identity(env, nullptr, "h").node_rank == 1);
}

TEST_CASE("RANK=0 WORLD_SIZE=1 alone is a complete single-rank set", "[identity]") {
  const auto id = resolve_identity(map_environment{{"RANK", "0"}, {"WORLD_SIZE", "1"}}, nullptr, "h");
  CHECK(id.source == identity_source::torchrun);
  CHECK(id.local_world_size == 1);
  CHECK(id.num_nodes == 1);
}

TEST_CASE("a single-node torchrun needs no NODE_RANK", "[identity]") {
  auto env = map_environment{{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}};
  const auto id = resolve_identity(env, nullptr, "h");
  CHECK(id.node_rank == 0);
  CHECK(id.num_nodes == 1);
}

TEST_CASE("PMIx is the truth, and agreeing environment sources are accepted", "[identity]") {
  const auto facts = pmix_rank5();
  const auto id = resolve_identity(slurm_step(), &facts, "c2");
  CHECK(id.source == identity_source::pmix);
  CHECK(id.rank == 5);
  CHECK(id.local_world_size == 2);
  CHECK(id.num_nodes == 3);
  CHECK(id.job_id == "42");
  CHECK(id.step_id == "3");

  // Variables exported by a helper such as `jobkit exec` from the same identity.
  pmix_facts uniform = facts;
  uniform.world_size = 8;
  uniform.local_world_size = 4;
  uniform.num_nodes = 2;
  uniform.local_peers = {4, 5, 6, 7};
  const auto exported = resolve_identity(torchrun(), &uniform, "c2");
  CHECK(exported.source == identity_source::pmix);
  CHECK(exported.world_size == 8);
}

TEST_CASE("the torch variables jobkit set hold on an uneven layout", "[identity]") {
  // What `jobkit exec` gives rank 5 of the Slurm step 4+2+1 (slurm_step): LOCAL_WORLD_SIZE 2 of 7
  // ranks on 3 nodes, which torchrun's rule (as many processes on every node) refuses.
  const map_environment exported = {{"RANK", "5"},       {"WORLD_SIZE", "7"},
                                    {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                    {"NODE_RANK", "1"},  {"JOBKIT_TORCH_VARIABLES", "5,1,7,2,1,3"}};
  SECTION("with the Slurm step and PMIx") {
    auto facts = pmix_rank5();
    const auto env = with(slurm_step(), {{"RANK", "5"},
                                         {"WORLD_SIZE", "7"},
                                         {"LOCAL_RANK", "1"},
                                         {"LOCAL_WORLD_SIZE", "2"},
                                         {"NODE_RANK", "1"},
                                         {"JOBKIT_TORCH_VARIABLES", "5,1,7,2,1,3"}});
    const auto id = resolve_identity(env, &facts, "c2");
    CHECK(id.source == identity_source::pmix);
    CHECK(id.num_nodes == 3);
    CHECK_NOTHROW(jobkit::detail::check_environment_before_pmix(with(env, {{"PMIX_RANK", "5"}})));
  }
  SECTION("alone (a child whose launcher variables were cleared)") {
    const auto id = resolve_identity(exported, nullptr, "c2");
    CHECK(id.source == identity_source::torchrun);
    CHECK(id.rank == 5);
    CHECK(id.local_world_size == 2);
    CHECK(id.num_nodes == 3);
    CHECK(id.node_rank == 1);
  }
  SECTION("changed since (torchrun under jobkit exec): torchrun's rule again") {
    CHECK(contains(error_of(with(exported, {{"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}})),
                   "WORLD_SIZE='7' is not a multiple of LOCAL_WORLD_SIZE='4'"));
    CHECK(contains(error_of(with(exported, {{"GROUP_RANK", "0"}})),
                   "WORLD_SIZE='7' is not a multiple of LOCAL_WORLD_SIZE='2'"));
  }
  SECTION("a record that is not one identity is named") {
    for (const char* bad : {"5,1,7,2,1", "5,1,7,2,1,3,0", "5,1,7,2,1,x", "5,1,7,2,1,-3", "5,2,7,2,1,3", "5,1,7,2,3,3",
                            "", "5,,7,2,1,3", "5,1,7,2,1,9"}) {
      INFO(bad);
      CHECK(contains(error_of(with(exported, {{"JOBKIT_TORCH_VARIABLES", bad}})),
                     fmt::format("JOBKIT_TORCH_VARIABLES='{}' is not six counts", bad)));
    }
  }
}

TEST_CASE("outside Slurm the job id is the PMIx namespace", "[identity]") {
  auto facts = pmix_rank5();
  facts.nspace = "prterun-host-1234@1";
  const auto id = resolve_identity(map_environment{}, &facts, "h");
  CHECK(id.job_id == "prterun-host-1234@1");
  CHECK(id.step_id.empty());
}

TEST_CASE("JOBKIT_IDENTITY forces one source and ignores the others", "[identity]") {
  SECTION("default ignores even malformed launcher variables") {
    auto env = with(slurm_step(), {{"JOBKIT_IDENTITY", "default"}, {"RANK", "abc"}});
    const auto id = resolve_identity(env, nullptr, "h");
    CHECK(id.source == identity_source::defaults);
    CHECK(id.job_id.empty());
  }
  SECTION("torchrun wins over a contradicting Slurm task") {
    auto env = slurm_step();
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{{"RANK", "1"},
                                                                               {"WORLD_SIZE", "2"},
                                                                               {"LOCAL_RANK", "1"},
                                                                               {"LOCAL_WORLD_SIZE", "2"},
                                                                               {"JOBKIT_IDENTITY", "torchrun"}}) {
      env.set(k, v);
    }
    const auto id = resolve_identity(env, nullptr, "h");
    CHECK(id.source == identity_source::torchrun);
    CHECK(id.rank == 1);
    CHECK(id.world_size == 2);
  }
  SECTION("slurm") {
    auto env = with(slurm_step(), {{"JOBKIT_IDENTITY", "slurm"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
    CHECK(resolve_identity(env, nullptr, "h").source == identity_source::slurm);
  }
}

TEST_CASE("the environment is checked against PMIX_RANK before PMIx_Init", "[identity]") {
  using jobkit::detail::check_environment_before_pmix;
  SECTION("agreeing") {
    auto env = with(slurm_step(), {{"PMIX_RANK", "5"}, {"PMIX_NAMESPACE", "slurm.pmix.42.3"}});
    CHECK_NOTHROW(check_environment_before_pmix(env));
    CHECK(jobkit::detail::pmix_server_advertised(env));
  }
  SECTION("a torchrun child that inherited its task's PMIX_RANK") {
    auto env =
        with(torchrun(), {{"PMIX_RANK", "1"}, {"PMIX_NAMESPACE", "slurm.pmix.42.3"}, {"TORCHELASTIC_RUN_ID", "x"}});
    try {
      check_environment_before_pmix(env);
      FAIL("no error");
    } catch (const jobkit::error& e) {
      const std::string message = e.what();
      CHECK(e.code() == errc::invalid_environment);
      CHECK(contains(message, "PMIX_RANK='1'"));
      CHECK(contains(message, "RANK='5'"));
      CHECK(contains(message, "torchrun inside srun"));
    }
  }
  SECTION("a forced source skips the check") {
    auto env = with(torchrun(), {{"PMIX_RANK", "1"}, {"JOBKIT_IDENTITY", "torchrun"}});
    CHECK_NOTHROW(check_environment_before_pmix(env));
  }
}

TEST_CASE("bad input names the variable and its value", "[identity][errors]") {
  const map_environment empty;
  const std::vector<bad_case> cases = {
      // numbers
      {"non-numeric", with(torchrun(), {{"RANK", "abc"}}), {"RANK='abc'", "not a non-negative integer"}},
      {"negative", with(torchrun(), {{"RANK", "-1"}}), {"RANK='-1'", "negative"}},
      {"empty", with(torchrun(), {{"LOCAL_RANK", ""}}), {"LOCAL_RANK=''"}},
      {"leading space", with(torchrun(), {{"WORLD_SIZE", " 8"}}), {"WORLD_SIZE=' 8'"}},
      {"fraction", with(torchrun(), {{"RANK", "3.0"}}), {"RANK='3.0'"}},
      {"plus sign", with(torchrun(), {{"RANK", "+3"}}), {"RANK='+3'"}},
      {"overflow", with(torchrun(), {{"RANK", "99999999999"}}), {"RANK='99999999999'", "out of range"}},
      {"zero world", with(torchrun(), {{"WORLD_SIZE", "0"}}), {"WORLD_SIZE='0'", "at least 1"}},
      // torchrun bounds and partial sets
      {"rank >= world", with(torchrun(), {{"RANK", "8"}}), {"RANK='8' must be less than WORLD_SIZE='8'"}},
      {"local rank >= local world",
       with(torchrun(), {{"LOCAL_RANK", "4"}}),
       {"LOCAL_RANK='4' must be less than LOCAL_WORLD_SIZE='4'"}},
      {"RANK without WORLD_SIZE", map_environment{{"RANK", "0"}}, {"partial", "RANK='0'", "WORLD_SIZE"}},
      {"WORLD_SIZE without RANK", map_environment{{"WORLD_SIZE", "4"}}, {"partial", "WORLD_SIZE='4'", "RANK"}},
      {"no local values",
       with(torchrun(), {}, {"LOCAL_RANK", "LOCAL_WORLD_SIZE"}),
       {"partial", "LOCAL_RANK, LOCAL_WORLD_SIZE are not"}},
      {"LOCAL_RANK alone", map_environment{{"LOCAL_RANK", "0"}}, {"partial", "LOCAL_RANK='0'"}},
      {"NODE_RANK alone", map_environment{{"NODE_RANK", "1"}}, {"partial", "NODE_RANK='1'"}},
      {"local world > world",
       with(torchrun(), {{"LOCAL_WORLD_SIZE", "16"}}),
       {"LOCAL_WORLD_SIZE='16' must not exceed WORLD_SIZE='8'"}},
      {"uneven torchrun",
       with(torchrun(), {{"WORLD_SIZE", "7"}}),
       {"WORLD_SIZE='7' is not a multiple of LOCAL_WORLD_SIZE='4'"}},
      {"NODE_RANK vs GROUP_RANK",
       with(torchrun(), {{"GROUP_RANK", "0"}}),
       {"NODE_RANK='1' contradicts GROUP_RANK='0'"}},
      {"missing node rank", with(torchrun(), {}, {"NODE_RANK"}), {"neither NODE_RANK nor GROUP_RANK"}},
      {"node rank >= nodes", with(torchrun(), {{"NODE_RANK", "2"}}), {"NODE_RANK='2' must be less than"}},
      // Slurm step
      {"non-numeric SLURM_PROCID", with(slurm_step(), {{"SLURM_PROCID", "x"}}), {"SLURM_PROCID='x'"}},
      {"partial Slurm step",
       with(slurm_step(), {}, {"SLURM_LOCALID", "SLURM_NODEID"}),
       {"partial Slurm step environment", "SLURM_LOCALID, SLURM_NODEID are not"}},
      {"zero nodes", with(slurm_step(), {{"SLURM_STEP_NUM_NODES", "0"}}), {"SLURM_STEP_NUM_NODES='0'"}},
      {"unclosed repeat",
       with(slurm_step(), {{"SLURM_STEP_TASKS_PER_NODE", "1(x2"}}),
       {"SLURM_STEP_TASKS_PER_NODE='1(x2'", "not closed"}},
      {"empty layout",
       with(slurm_step(), {{"SLURM_STEP_TASKS_PER_NODE", ""}}),
       {"SLURM_STEP_TASKS_PER_NODE=''", "empty"}},
      {"missing count", with(slurm_step(), {{"SLURM_STEP_TASKS_PER_NODE", "4,,1"}}), {"count is missing"}},
      {"zero tasks on a node", with(slurm_step(), {{"SLURM_STEP_TASKS_PER_NODE", "0,6,1"}}), {"a node has no tasks"}},
      {"bad separator", with(slurm_step(), {{"SLURM_STEP_TASKS_PER_NODE", "4;2;1"}}), {"unexpected ';'"}},
      {"layout node count",
       with(slurm_step(), {{"SLURM_STEP_TASKS_PER_NODE", "5,2"}}),
       {"lists 2 nodes but SLURM_STEP_NUM_NODES='3'"}},
      {"layout task count",
       with(slurm_step(), {{"SLURM_STEP_TASKS_PER_NODE", "4,2(x2)"}}),
       {"adds up to 8 tasks but SLURM_STEP_NUM_TASKS='7'"}},
      {"procid >= tasks",
       with(slurm_step(), {{"SLURM_PROCID", "7"}}),
       {"SLURM_PROCID='7' must be less than SLURM_STEP_NUM_TASKS='7'"}},
      {"nodeid >= nodes",
       with(slurm_step(), {{"SLURM_NODEID", "3"}}),
       {"SLURM_NODEID='3' must be less than SLURM_STEP_NUM_NODES='3'"}},
      {"localid >= tasks on node",
       with(slurm_step(), {{"SLURM_LOCALID", "2"}}),
       {"SLURM_LOCALID='2' must be less than SLURM_STEP_TASKS_PER_NODE='4,2,1'"}},
      // contradictions between sources
      {"torchrun inside srun --mpi=none",
       with(slurm_step(), {{"RANK", "1"},
                           {"WORLD_SIZE", "8"},
                           {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "4"},
                           {"NODE_RANK", "0"},
                           {"TORCHELASTIC_RUN_ID", "r"}}),
       {"contradicts the Slurm step environment", "rank SLURM_PROCID='5' vs RANK='1'",
        "world size SLURM_STEP_NUM_TASKS='7' vs WORLD_SIZE='8'", "torchrun inside srun"}},
      // source selection
      {"unknown JOBKIT_IDENTITY", with(empty, {{"JOBKIT_IDENTITY", "mpi"}}), {"JOBKIT_IDENTITY='mpi'"}},
      {"forced slurm outside a step",
       with(empty, {{"JOBKIT_IDENTITY", "slurm"}}),
       {"JOBKIT_IDENTITY='slurm'", "SLURM_STEP_NUM_TASKS"}},
      {"forced torchrun without variables",
       with(empty, {{"JOBKIT_IDENTITY", "torchrun"}}),
       {"JOBKIT_IDENTITY='torchrun'"}},
      {"forced pmix without a server", with(empty, {{"JOBKIT_IDENTITY", "pmix"}}), {"JOBKIT_IDENTITY='pmix'"}},
  };
  REQUIRE(cases.size() >= 25);
  for (const auto& c : cases) {
    INFO(c.what);
    const auto message = error_of(c.env);
    INFO(message);
    for (const auto& part : c.expected) CHECK(contains(message, part));
  }
}

TEST_CASE("PMIx disagreeing with the environment is an error naming both", "[identity][errors]") {
  const auto facts = pmix_rank5();
  SECTION("Slurm variables of another step") {
    const auto message = error_of(with(slurm_step(), {{"SLURM_PROCID", "4"}, {"SLURM_LOCALID", "0"}}), &facts);
    CHECK(contains(message, "the Slurm step environment contradicts PMIx"));
    CHECK(contains(message, "rank PMIx rank=5 vs SLURM_PROCID='4'"));
    CHECK(contains(message, "local rank PMIx PMIX_LOCAL_RANK=1 vs SLURM_LOCALID='0'"));
  }
  SECTION("torchrun variables") {
    const auto message = error_of(torchrun(), &facts);
    CHECK(contains(message, "the torchrun environment contradicts PMIx"));
    CHECK(contains(message, "world size PMIx PMIX_JOB_SIZE=7 vs WORLD_SIZE='8'"));
  }
}

TEST_CASE("an inconsistent PMIx server answer is reported, not trusted", "[identity][errors]") {
  auto facts = pmix_rank5();
  facts.local_peers = {4, 6};
  try {
    resolve_identity(map_environment{}, &facts, "h");
    FAIL("no error");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::pmix);
    CHECK(contains(e.what(), "PMIX_LOCAL_PEERS=4,6"));
  }
  facts = pmix_rank5();
  facts.rank = 7;
  CHECK(contains(error_of(map_environment{}, &facts), "PMIx rank=7 is not below PMIx PMIX_JOB_SIZE=7"));
}

TEST_CASE("identity prints as a line and as JSON", "[identity]") {
  auto id = resolve_identity(slurm_step(), nullptr, "c\"2");
  CHECK(jobkit::to_string(id) == "rank 5/7 local 1/2 node 1/3 host c\"2 job 42 step 3 (slurm)");
  CHECK(jobkit::to_json(id) ==
        R"({"rank":5,"world_size":7,"local_rank":1,"local_world_size":2,"node_rank":1,)"
        R"("num_nodes":3,"hostname":"c\"2","job_id":"42","step_id":"3","restart_count":0,)"
        R"("array_job_id":"","array_task_id":null,"component":0,"num_components":1,"component_rank":5,)"
        R"("component_size":7,"component_nodes":"","source":"slurm"})");
  CHECK(jobkit::to_string(identity_source::defaults) == "default");
}

TEST_CASE("a requeued array task knows its restart count and array ids", "[identity]") {
  auto env = slurm_step();
  env.set("SLURM_RESTART_COUNT", "2");
  env.set("SLURM_ARRAY_JOB_ID", "40");
  env.set("SLURM_ARRAY_TASK_ID", "1");
  const auto id = resolve_identity(env, nullptr, "c2");
  CHECK(id.restart_count == 2);
  CHECK(id.array_job_id == "40");
  CHECK(id.array_task_id == 1);
  CHECK(jobkit::to_string(id) == "rank 5/7 local 1/2 node 1/3 host c2 job 42 step 3 restart 2 array 40_1 (slurm)");
  CHECK(contains(jobkit::to_json(id), R"("restart_count":2,"array_job_id":"40","array_task_id":1,)"));
  // A batch script (no step) still knows them: requeue needs them there.
  const auto batch =
      resolve_identity(map_environment{{"SLURM_JOB_ID", "42"}, {"SLURM_RESTART_COUNT", "1"}}, nullptr, "c1");
  CHECK(batch.restart_count == 1);

  env.set("SLURM_RESTART_COUNT", "-1");
  CHECK(contains(error_of(env, nullptr), "SLURM_RESTART_COUNT='-1'"));
  env.set("SLURM_RESTART_COUNT", "0");
  env.unset("SLURM_ARRAY_TASK_ID");
  CHECK(contains(error_of(env, nullptr), "SLURM_ARRAY_JOB_ID='40' is set but SLURM_ARRAY_TASK_ID is not"));
}

TEST_CASE("Slurm's direct modex is used only in a step on the job's first nodes, in their order", "[identity]") {
  using jobkit::detail::slurm_direct_modex_misrouted;
  // Slurm sends the request for a rank on the step's k-th node to the job's k-th node.
  CHECK_FALSE(slurm_direct_modex_misrouted("c[1-3]", "c[1-3]"));
  CHECK_FALSE(slurm_direct_modex_misrouted("c[1-2]", "c[1-3]"));
  CHECK_FALSE(slurm_direct_modex_misrouted("c1", "c[1-3]"));
  CHECK_FALSE(slurm_direct_modex_misrouted("gpu[08-09]", "gpu[08-10],cpu1"));
  CHECK_FALSE(slurm_direct_modex_misrouted(std::nullopt, "c[1-3]"));  // not a Slurm step
  CHECK_FALSE(slurm_direct_modex_misrouted("c[2-3]", std::nullopt));
  const auto c2c3 = slurm_direct_modex_misrouted("c[2-3]", "c[1-3]");
  REQUIRE(c2c3);
  CHECK(contains(*c2c3,
                 "node 0 of the step (SLURM_STEP_NODELIST=c[2-3]) is c2, node 0 of the job "
                 "(SLURM_JOB_NODELIST=c[1-3]) is c1"));
  const auto c1c3 = slurm_direct_modex_misrouted("c[1,3]", "c[1-3]");
  REQUIRE(c1c3);
  CHECK(contains(*c1c3, "node 1 of the step (SLURM_STEP_NODELIST=c[1,3]) is c3"));
  CHECK(slurm_direct_modex_misrouted("c3", "c[1-3]"));
  CHECK(slurm_direct_modex_misrouted("c[1-4]", "c[1-3]"));  // a step past the job's nodes: "none"
  CHECK(contains(*slurm_direct_modex_misrouted("c[1-4]", "c[1-3]"), "is none"));
  CHECK(contains(*slurm_direct_modex_misrouted("c[1-", "c[1-3]"), "cannot be read"));
}

TEST_CASE("a node's rank under PMIx is its position in the job's node list", "[identity]") {
  using jobkit::detail::place_in_node_list;
  // Slurm: the step's nodes in node id order; PRRTE: the nodes that run ranks, whatever their ids
  // (mpirun's own host is node id 0 even without ranks: ids 1 and 2 are node ranks 0 and 1).
  CHECK(place_in_node_list("c1,c2,c3", "c3").node_rank == 2);
  CHECK(place_in_node_list("c1,c2,c3", "c3").num_nodes == 3);
  CHECK(place_in_node_list("c2,c3", "c2").node_rank == 0);
  CHECK(place_in_node_list("c2,c3", "c3").node_rank == 1);
  CHECK(place_in_node_list("c2,c3", "c3").num_nodes == 2);
  CHECK(place_in_node_list("n17", "n17").node_rank == 0);
  CHECK(place_in_node_list("n1,n10,n100", "n10").node_rank == 1);  // whole names, not prefixes
  for (const auto& [list, host] :
       {std::pair{"c2,c3", "c1"}, {"c2,c3", "c"}, {"c2,c2", "c2"}, {"c2,,c3", "c2"}, {"", "c1"}, {"c1", ""}}) {
    INFO(list << " / " << host);
    try {
      place_in_node_list(list, host);
      FAIL("no error");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == errc::pmix);
      CHECK(contains(e.what(), "is not in the job's node list"));
    }
  }
}

TEST_CASE("PMIx's node rank is checked against SLURM_NODEID, naming the node list", "[identity][errors]") {
  auto facts = pmix_rank5();
  facts.node_rank = 2;
  facts.node_origin = "position of PMIX_HOSTNAME='c3' in PMIx_Resolve_nodes='c1,c2,c3'";
  const auto message = error_of(slurm_step(), &facts);
  CHECK(contains(message,
                 "node rank PMIx node rank 2 (position of PMIX_HOSTNAME='c3' in "
                 "PMIx_Resolve_nodes='c1,c2,c3') vs SLURM_NODEID='1'"));
}

TEST_CASE("PMIX_LOCAL_PEERS may come in any order (Open MPI 5's mpirun)", "[identity]") {
  auto facts = pmix_rank5();
  facts.local_peers = {5, 4};
  CHECK(resolve_identity(map_environment{}, &facts, "h").local_rank == 1);
  facts.local_peers = {5, 5};
  CHECK(contains(error_of(map_environment{}, &facts), "PMIX_LOCAL_PEERS=5,5 does not hold rank 5 once"));
}

TEST_CASE("Slurm host lists expand in order, keeping a range's width", "[identity][host_list]") {
  using jobkit::detail::expand_host_list;
  using list = std::vector<std::string>;
  CHECK(expand_host_list("L", "c1") == list{"c1"});
  CHECK(expand_host_list("L", "c[1-3]") == list{"c1", "c2", "c3"});
  CHECK(expand_host_list("L", "gpu[08-10],cpu5") == list{"gpu08", "gpu09", "gpu10", "cpu5"});
  CHECK(expand_host_list("L", "n[1,3-4]x") == list{"n1x", "n3x", "n4x"});
  CHECK(expand_host_list("L", "r[1-2]n[1-2]") == list{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(expand_host_list("L", "[7-8]") == list{"7", "8"});
  // Sizes are counted before anything is expanded: many brackets, long names and many names fail
  // at once (a 1M-fold bracket repeated 30 times once took 4.7 s and 958 MB before it was refused).
  std::string brackets = "a";
  for (int i = 0; i < 30; ++i) brackets += "[0-999999]";
  const std::string long_name = std::string(300, 'x') + "[1-2]";
  std::string many_names;
  for (int i = 0; i < 20; ++i) many_names += fmt::format("{}n[0-9999]", many_names.empty() ? "" : ",");
  const std::vector<std::string> bad_lists = {
      "",    "c[1-3", "c1-3]",         "c[3-1]",         "c[]",    "c[a]",    "c[1-]",    "c1,,c2",
      "c1,", ",c1",   "c[1-99999999]", "c[99999999999]", brackets, long_name, many_names, "a[1-1000]b[1-1000]c[1-2]"};
  for (const auto& bad : bad_lists) {
    INFO(bad);
    try {
      expand_host_list("SLURM_STEP_NODELIST", bad);
      FAIL("accepted");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == errc::invalid_environment);
      CHECK(contains(e.what(), fmt::format("SLURM_STEP_NODELIST='{}' is not a Slurm host list", bad)));
    }
  }
  CHECK(expand_host_list("L", "n[1-99999]").size() == 99'999);
  CHECK(expand_host_list("L", "n[1-3]", 3).size() == 3);
  CHECK_THROWS_AS(expand_host_list("L", "n[1-3]", 2), jobkit::error);
}

namespace {
/// Rank 3 of a heterogeneous step of 2 + 3 ranks: component 0 on c1 (2 ranks), component 1 on
/// c[2-3] (2 + 1), as `srun -N1 -n2 A : -N2 -n3 B` places them (rank 3 is the second on c2).
map_environment het_step() {
  return {{"SLURM_JOB_ID", "17"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NUM_TASKS", "5"},
          {"SLURM_STEP_NUM_NODES", "3"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
          {"SLURM_STEP_NODELIST", "c[1-3]"},
          {"SLURM_PROCID", "3"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_HET_SIZE", "2"},
          {"SLURM_JOB_NODELIST_PACK_GROUP_0", "c1"},
          {"SLURM_JOB_NODELIST_PACK_GROUP_1", "c[2-3]"}};
}
}  // namespace

TEST_CASE("a heterogeneous job's component comes from the step's layout and the components' nodes", "[identity][het]") {
  auto id = resolve_identity(het_step(), nullptr, "c2");
  CHECK(id.rank == 3);
  CHECK(id.component == 1);
  CHECK(id.num_components == 2);
  CHECK(id.component_rank == 1);
  CHECK(id.component_size == 3);
  CHECK(id.component_nodes == "c[2-3]");
  CHECK(contains(jobkit::to_string(id), " component 1/2 rank 1/3 on c[2-3] (slurm)"));

  // Slurm's newer names win over the older ones; rank 0 is component 0's first.
  auto first = with(het_step(), {{"SLURM_PROCID", "0"},
                                 {"SLURM_LOCALID", "0"},
                                 {"SLURM_NODEID", "0"},
                                 {"SLURM_JOB_NODELIST_HET_GROUP_0", "c1"},
                                 {"SLURM_JOB_NODELIST_HET_GROUP_1", "c[2-3]"},
                                 {"SLURM_JOB_NODELIST_PACK_GROUP_1", "wrong[1-2]"}});
  id = resolve_identity(first, nullptr, "c1");
  CHECK((id.component == 0 && id.component_rank == 0 && id.component_size == 2 && id.component_nodes == "c1"));

  // A step over component 1 alone (srun --het-group=1): its ranks start at 0 again.
  auto alone = with(het_step(), {{"SLURM_STEP_NUM_TASKS", "3"},
                                 {"SLURM_STEP_NUM_NODES", "2"},
                                 {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
                                 {"SLURM_STEP_NODELIST", "c[2-3]"},
                                 {"SLURM_PROCID", "2"},
                                 {"SLURM_LOCALID", "0"},
                                 {"SLURM_NODEID", "1"}});
  id = resolve_identity(alone, nullptr, "c3");
  CHECK((id.component == 1 && id.component_rank == 2 && id.component_size == 3 && id.component_nodes == "c[2-3]"));

  // A step on part of a component's nodes names them.
  auto part = with(het_step(), {{"SLURM_STEP_NUM_TASKS", "3"},
                                {"SLURM_STEP_NUM_NODES", "2"},
                                {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
                                {"SLURM_STEP_NODELIST", "c[1,3]"},
                                {"SLURM_PROCID", "2"},
                                {"SLURM_LOCALID", "0"},
                                {"SLURM_NODEID", "1"}});
  id = resolve_identity(part, nullptr, "c3");
  CHECK((id.component == 1 && id.component_rank == 0 && id.component_size == 1 && id.component_nodes == "c3"));

  // Outside a heterogeneous job, and for a torchrun inside a task, component 0 of 1 is the whole step.
  id = resolve_identity(slurm_step(), nullptr, "c2");
  CHECK((id.component == 0 && id.num_components == 1 && id.component_rank == 5 && id.component_size == 7 &&
         id.component_nodes.empty()));
  id = resolve_identity(with(het_step(), {{"JOBKIT_IDENTITY", "torchrun"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}),
                        nullptr, "c2");
  CHECK((id.component == 0 && id.num_components == 1 && id.component_size == 1));
  // A heterogeneous job's variables inherited by another job (submitted from its batch script)
  // describe that job: its leader is not this job, and they are not read.
  id = resolve_identity(with(het_step(), {{"SLURM_JOB_ID_PACK_GROUP_0", "17"}}), nullptr, "c2");
  CHECK(id.component == 1);
  CHECK_THROWS_AS(resolve_identity(
                      with(het_step(), {{"SLURM_JOB_ID_HET_GROUP_0", "17"}, {"SLURM_JOB_NODELIST_PACK_GROUP_1", "c9"}}),
                      nullptr, "c2"),
                  jobkit::error);
  id = resolve_identity(
      with(het_step(), {{"SLURM_JOB_ID_PACK_GROUP_0", "16"}, {"SLURM_JOB_NODELIST_PACK_GROUP_1", "c9"}}), nullptr,
      "c2");
  CHECK((id.component == 0 && id.num_components == 1 && id.component_rank == 3 && id.component_size == 5));
}

TEST_CASE("a heterogeneous job's variables that do not describe one component are errors naming them",
          "[identity][het][errors]") {
  const std::vector<bad_case> cases = {
      {"a component's node list missing",
       with(het_step(), {}, {"SLURM_JOB_NODELIST_PACK_GROUP_1"}),
       {"SLURM_JOB_NODELIST_HET_GROUP_1 and SLURM_JOB_NODELIST_PACK_GROUP_1 are not set", "SLURM_HET_SIZE"}},
      {"a node in two components",
       with(het_step(), {{"SLURM_JOB_NODELIST_PACK_GROUP_1", "c[1-3]"}}),
       {"node c1 is in two components' node lists", "SLURM_JOB_NODELIST_PACK_GROUP_0='c1'",
        "SLURM_JOB_NODELIST_PACK_GROUP_1='c[1-3]'"}},
      {"a step node in no component",
       with(het_step(), {{"SLURM_JOB_NODELIST_PACK_GROUP_1", "c2"}}),
       {"node c3 of SLURM_STEP_NODELIST='c[1-3]' is in none of the components' node lists"}},
      {"a rank outside its node's component",
       with(het_step(), {{"SLURM_JOB_NODELIST_PACK_GROUP_0", "c2"}, {"SLURM_JOB_NODELIST_PACK_GROUP_1", "c[1,3]"}}),
       {"rank 3 on node c2 (component 0 of", "is not among that component's ranks 0 to 1"}},
      {"node list and layout disagree",
       with(het_step(), {{"SLURM_STEP_NODELIST", "c[1-2]"}}),
       {"SLURM_STEP_NODELIST='c[1-2]' names 2 nodes but SLURM_STEP_TASKS_PER_NODE='2(x2),1' lists 3"}},
      {"no step node list",
       with(het_step(), {}, {"SLURM_STEP_NODELIST"}),
       {"SLURM_HET_SIZE='2' says this is a heterogeneous job", "SLURM_STEP_NODELIST"}},
      {"a bad host list",
       with(het_step(), {{"SLURM_JOB_NODELIST_PACK_GROUP_0", "c[1"}}),
       {"SLURM_JOB_NODELIST_PACK_GROUP_0='c[1' is not a Slurm host list"}},
      {"a bad component count",
       with(het_step(), {{"SLURM_HET_SIZE", "0"}}),
       {"SLURM_HET_SIZE='0' must be between 1 and 4096"}},
      {"the older count alone",
       with(het_step(), {{"SLURM_PACK_SIZE", "x"}}, {"SLURM_HET_SIZE"}),
       {"SLURM_PACK_SIZE='x' is not a non-negative integer"}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    try {
      resolve_identity(c.env, nullptr, "c2");
      FAIL("accepted");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == errc::invalid_environment);
      for (const auto& part : c.expected) CHECK(contains(e.what(), part));
    }
  }
}
