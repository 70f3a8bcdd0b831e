// PMI-2 without a launcher: the process mapping parser, the value encoding, the key names, and
// identity discovery from synthetic PMI-2 facts.
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "core/environment.hpp"
#include "identity/discovery.hpp"
#include "jobkit/error.hpp"
#include "jobkit/identity.hpp"
#include "pmi2/wire.hpp"
#include "support.hpp"

using jobkit::errc;
using jobkit::identity_source;
using jobkit::detail::map_environment;
using jobkit::detail::pmi2_facts;
using jobkit::detail::resolve_identity;
using test_support::contains;
namespace d = jobkit::detail;

namespace {

std::string mapping_error(const std::string& text, int size) {
  try {
    d::parse_process_mapping(text, size);
  } catch (const jobkit::error& e) {
    CHECK(e.code() == errc::pmix);
    return e.what();
  }
  return "(no error)";
}

/// Rank 5 of 7 on 3 nodes, 4 + 2 + 1 in blocks: second rank of node 1.
pmi2_facts rank5(std::optional<std::string> mapping = "(vector,(0,1,4),(1,1,2),(2,1,1))") {
  pmi2_facts f;
  f.rank = 5;
  f.world_size = 7;
  f.job_id = "42.3";
  f.process_mapping = std::move(mapping);
  if (!f.process_mapping) f.mapping_problem = "the PMI-2 server does not provide PMI_process_mapping";
  return f;
}

map_environment slurm_step() {
  return {{"SLURM_JOB_ID", "42"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_STEP_NUM_TASKS", "7"},
          {"SLURM_STEP_NUM_NODES", "3"},
          {"SLURM_PROCID", "5"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_STEP_TASKS_PER_NODE", "4,2,1"},
          {"PMI_FD", "11"},
          {"PMI_RANK", "5"},
          {"PMI_SIZE", "7"}};
}

/// what() of the jobkit::error that fn throws; "(no error)" when it returns.
template <class F>
std::string error_message(F fn) {
  try {
    fn();
  } catch (const jobkit::error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string identity_error(const map_environment& env, const pmi2_facts& facts, errc expected) {
  try {
    resolve_identity(env, nullptr, "c2", &facts);
  } catch (const jobkit::error& e) {
    CHECK(e.code() == expected);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the process mapping gives every rank's node, as Slurm's mpi/pmi2 serves it", "[pmi2]") {
  // Measured on the dev cluster (Slurm 22.05): srun --mpi=pmi2 -N3 -n7 (block: 5 + 1 + 1).
  CHECK(d::parse_process_mapping("(vector,(0,1,5),(1,2,1))", 7) == std::vector<int>{0, 0, 0, 0, 0, 1, 2});
  // -N3 -n7 --distribution=cyclic: 0, 1, 2 on c1, c2, c3, then 3 to 6 on c1.
  CHECK(d::parse_process_mapping("(vector,(0,3,1),(0,1,1),(0,1,1),(0,1,1),(0,1,1))", 7) ==
        std::vector<int>{0, 1, 2, 0, 0, 0, 0});
  // --distribution=plane=2.
  CHECK(d::parse_process_mapping("(vector,(0,1,2),(1,2,1),(0,1,3))", 7) == std::vector<int>{0, 0, 1, 2, 0, 0, 0});
  CHECK(d::parse_process_mapping("(vector,(0,3,2))", 6) == std::vector<int>{0, 0, 1, 1, 2, 2});
  CHECK(d::parse_process_mapping(" (vector,(0,1,1))\n", 1) == std::vector<int>{0});

  const std::vector<int> cyclic{0, 1, 2, 0, 0, 0, 0};
  const auto p = d::place_of(cyclic, 4);
  CHECK(p.node_rank == 0);
  CHECK(p.local_rank == 2);
  CHECK(p.local_world_size == 5);
  CHECK(p.num_nodes == 3);
  const auto q = d::place_of(cyclic, 2);
  CHECK(q.node_rank == 2);
  CHECK(q.local_rank == 0);
  CHECK(q.local_world_size == 1);
}

TEST_CASE("a malformed process mapping is refused with the text and the reason", "[pmi2]") {
  struct bad {
    std::string text;
    int size;
    std::string why;
  };
  const std::vector<bad> cases = {
      {"", 1, "does not start with '(vector'"},
      {"(other,(0,1,1))", 1, "does not start with '(vector'"},
      {"(vector,(0,1,1)", 1, "closed by ')'"},
      {"(vector,(0,1,1))x", 1, "closed by ')'"},
      {"(vector,(0,1,1)),", 1, "closed by ')'"},
      {"(vector)", 1, "places 0 ranks, the job has 1"},
      {"(vector,(0,2,1))", 4, "places 2 ranks, the job has 4"},  // MPICH's repetition: refused
      {"(vector,(0,3,3))", 7, "more than the job's 7 ranks"},
      {"(vector,(0,1,2),(2,1,1))", 3, "node 1 holds no rank, but node 2 does"},
      {"(vector,(0,1,1),(2,1,1))", 2, "node 2 is named, but 2 ranks cannot fill more than 2 nodes"},
      {"(vector,(-1,1,1))", 1, "first node is not a number"},
      {"(vector,(0,0,1))", 1, "node count is not a positive number"},
      {"(vector,(0,1,0))", 1, "ranks per node is not a positive number"},
      {"(vector,(0,99999999999,1))", 1, "node count is not a positive number"},
      {"(vector,(2147483647,2147483647,2147483647))", 7, "node 4294967293 is named"},
      {"(vector,(0,1,2147483647))", 7, "more than the job's 7 ranks"},
      {"(vector, (0,1,1))", 1, "closed by ')'"},
      {"(vector,(0,1,1))", 0, "the job size 0 is not positive"},
      {"(vector" + std::string(2000, ','), 1, "longer than 1023 characters"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const auto message = mapping_error(c.text, c.size);
    CHECK(contains(message, "PMI_process_mapping"));
    CHECK(contains(message, c.why));
  }
}

TEST_CASE("bytes cross PMI-2 as hex parts that fit its values, and come back exactly", "[pmi2]") {
  std::mt19937 random(7);
  for (const std::size_t size : {0u, 1u, 499u, 500u, 501u, 1000u, 100000u}) {
    INFO(size);
    std::vector<std::byte> bytes(size);
    for (auto& b : bytes) b = static_cast<std::byte>(random());
    const auto parts = d::encode_pmi2_value(bytes);
    CHECK(parts.size() == std::max<std::size_t>(1, (size + 499) / 500));
    CHECK(d::pmi2_value_parts(parts.front()) == parts.size());
    std::vector<std::byte> back;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      CHECK(parts[i].size() <= d::pmi2_max_value_chars);
      CHECK(parts[i].find_first_of(";= ") == std::string::npos);  // PMI-2's wire delimiters
      d::decode_pmi2_part(parts[i], i == 0, back);
    }
    CHECK(back == bytes);
  }
  CHECK(d::encode_pmi2_value(std::vector<std::byte>{std::byte{0x0a}, std::byte{0xff}}).front() == "1:0aff");
}

TEST_CASE("malformed PMI-2 values are refused", "[pmi2]") {
  for (const std::string first : {"", "ab", ":ab", "0:", "x:ab", "-1:ab", "16385:", "99999999999:"}) {
    INFO(first);
    CHECK_THROWS_AS(d::pmi2_value_parts(first), jobkit::error);
  }
  std::vector<std::byte> out;
  CHECK(contains(error_message([&] { d::decode_pmi2_part("1:abc", true, out); }), "not whole bytes"));
  CHECK(contains(error_message([&] { d::decode_pmi2_part("zz", false, out); }), "not hex"));
  CHECK(contains(error_message([&] { d::decode_pmi2_part(std::string(1002, 'a'), false, out); }), "not whole bytes"));
}

TEST_CASE("PMI-2 keys carry the rank and the part, and only characters PMI-2 passes", "[pmi2]") {
  CHECK(d::pmi2_key("jobkit.endpoint", 3, 0) == "jobkit.endpoint@3");
  CHECK(d::pmi2_key("jobkit.endpoint", 3, 2) == "jobkit.endpoint@3+2");
  for (const std::string key : {"", "a;b", "a=b", "a b", "a\nb"}) {
    INFO(key);
    CHECK_THROWS_AS(d::pmi2_key(key, 0, 0), jobkit::error);
  }
  CHECK(contains(error_message([&] { d::pmi2_key(std::string(60, 'k'), 12345, 1); }), "too long"));
}

TEST_CASE("under PMI-2 the identity comes from PMI2_Init and the process mapping", "[pmi2][identity]") {
  const auto facts = rank5();
  const auto id = resolve_identity(slurm_step(), nullptr, "c2", &facts);
  CHECK(id.source == identity_source::pmi2);
  CHECK(id.rank == 5);
  CHECK(id.world_size == 7);
  CHECK(id.local_rank == 1);
  CHECK(id.local_world_size == 2);
  CHECK(id.node_rank == 1);
  CHECK(id.num_nodes == 3);
  CHECK(id.job_id == "42");
  CHECK(id.step_id == "3");
  CHECK(jobkit::to_string(id.source) == "pmi2");

  // JOBKIT_IDENTITY=pmi2 trusts PMI-2 alone: no Slurm variable is needed.
  const map_environment only = {{"JOBKIT_IDENTITY", "pmi2"}, {"PMI_FD", "11"}, {"PMI_RANK", "5"}, {"PMI_SIZE", "7"}};
  const auto forced = resolve_identity(only, nullptr, "c2", &facts);
  CHECK(forced.source == identity_source::pmi2);
  CHECK(forced.node_rank == 1);
  CHECK(forced.local_rank == 1);
  CHECK(forced.local_world_size == 2);
  CHECK(forced.num_nodes == 3);
  CHECK(forced.job_id == "42.3");  // PMI2_Job_GetId where SLURM_JOB_ID is not set
}

TEST_CASE("under --distribution=arbitrary the node values come from Slurm, not its placeholder mapping",
          "[pmi2][identity]") {
  // Slurm's mpi/pmi2 serves "every task on a node of its own" for this distribution.
  const auto facts = rank5("(vector,(0,7,1))");
  auto env = slurm_step();
  env.set("SLURM_DISTRIBUTION", "arbitrary");
  const auto id = resolve_identity(env, nullptr, "c2", &facts);
  CHECK(id.source == identity_source::pmi2);
  CHECK(id.node_rank == 1);
  CHECK(id.local_rank == 1);
  CHECK(id.local_world_size == 2);
  CHECK(id.num_nodes == 3);

  // Without SLURM_DISTRIBUTION saying so, the placeholder contradicts the step's variables.
  const auto message = identity_error(slurm_step(), facts, errc::invalid_environment);
  CHECK(contains(message, "contradicts PMI-2"));
  CHECK(contains(message, "SLURM_STEP_NUM_NODES='3'"));
  CHECK(contains(message, "PMI_process_mapping='(vector,(0,7,1))'"));

  // And without any Slurm variable, nothing can give the node values.
  const map_environment bare = {{"SLURM_DISTRIBUTION", "arbitrary"}};
  CHECK(contains(identity_error(bare, facts, errc::pmix), "SLURM_STEP_NUM_TASKS is not set"));
}

TEST_CASE("PMI-2 facts that are missing, malformed or contradicted are refused", "[pmi2][identity]") {
  const map_environment bare = {{"PMI_FD", "11"}, {"PMI_RANK", "5"}, {"PMI_SIZE", "7"}};
  const auto missing = identity_error(bare, rank5(std::nullopt), errc::pmix);
  CHECK(contains(missing, "does not provide PMI_process_mapping"));
  // Where the mapping is missing, the Slurm variables give the node values.
  const auto from_slurm = rank5(std::nullopt);
  CHECK(resolve_identity(slurm_step(), nullptr, "c2", &from_slurm).local_world_size == 2);

  CHECK(contains(identity_error(bare, rank5("(vector,(0,1,4),(1,1,2))"), errc::pmix), "places 6 ranks"));

  auto other_rank = slurm_step();
  other_rank.set("SLURM_PROCID", "4");
  other_rank.set("SLURM_LOCALID", "0");
  const auto contradiction = identity_error(other_rank, rank5(), errc::invalid_environment);
  CHECK(contains(contradiction, "rank PMI-2 rank=5 vs SLURM_PROCID='4'"));

  const map_environment forced = {{"JOBKIT_IDENTITY", "pmi2"}};
  CHECK(contains(error_message([&] { resolve_identity(forced, nullptr, "c2"); }), "no PMI-2 server is connected"));
}

TEST_CASE("PMI-2 is advertised by PMI_FD, PMI_RANK and PMI_SIZE, and JOBKIT_IDENTITY may ask for it", "[pmi2]") {
  CHECK(d::pmi2_server_advertised(map_environment{{"PMI_FD", "11"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}));
  CHECK_FALSE(d::pmi2_server_advertised(map_environment{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}));
  CHECK(d::requested_source(map_environment{{"JOBKIT_IDENTITY", "pmi2"}}) == d::source_request::pmi2);
  CHECK(contains(error_message([&] {
                   d::requested_source(map_environment{{"JOBKIT_IDENTITY", "pmi"}});
                 }),
                 "auto, pmix, pmi2, slurm"));

  // PMI_RANK is compared with the Slurm variables before PMI2_Init (a process spawned in a task).
  auto env = slurm_step();
  env.set("PMI_RANK", "6");
  CHECK(contains(error_message([&] { d::check_environment_before_pmix(env); }), "PMI_RANK='6'"));
}
