#include "identity/discovery.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <numeric>

#include "core/parse.hpp"
#include "identity/components.hpp"
#include "jobkit/error.hpp"
#include "pmi2/session.hpp"
#include "pmi2/wire.hpp"
#include "pmix/session.hpp"

namespace jobkit::detail {
namespace {

[[noreturn]] void fail(const std::string& message) { throw error(errc::invalid_environment, message); }

/// One value of a candidate identity and where it came from, e.g. "SLURM_PROCID='3'".
struct field {
  int value;
  std::string origin;
};

/// The identity one source claims. Every field is set, except for partial sources (PMIX_RANK
/// read before PMIx_Init), which only know the rank.
struct candidate {
  identity_source source;
  std::string name;
  std::optional<field> rank, world_size, local_rank, local_world_size, node_rank, num_nodes;
};

std::string quoted(std::string_view name, std::string_view value) { return fmt::format("{}='{}'", name, value); }

std::optional<field> read_count(const environment& env, std::string_view name) {
  auto value = env.get(name);
  if (!value) return std::nullopt;
  return field{parse_count(name, *value), quoted(name, *value)};
}

std::optional<field> read_size(const environment& env, std::string_view name) {
  auto size = read_count(env, name);
  if (size && size->value < 1) fail(fmt::format("{} must be at least 1", size->origin));
  return size;
}

void require_less(const field& index, const field& bound) {
  if (index.value >= bound.value) {
    fail(fmt::format("{} must be less than {}", index.origin, bound.origin));
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += separator;
    out += part;
  }
  return out;
}

void require_all_or_none(const environment& env, std::string_view what, const std::vector<std::string_view>& names) {
  std::vector<std::string> set, unset;
  for (auto name : names) {
    if (auto value = env.get(name)) {
      set.push_back(quoted(name, *value));
    } else {
      unset.emplace_back(name);
    }
  }
  if (!set.empty() && !unset.empty()) {
    fail(fmt::format("partial {}: {} {} set but {} {} not", what, join(set, ", "), set.size() == 1 ? "is" : "are",
                     join(unset, ", "), unset.size() == 1 ? "is" : "are"));
  }
}

std::optional<candidate> slurm_candidate(const environment& env) {
  if (!env.has("SLURM_STEP_NUM_TASKS")) return std::nullopt;
  require_all_or_none(env, "Slurm step environment",
                      {"SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE", "SLURM_PROCID",
                       "SLURM_LOCALID", "SLURM_NODEID"});
  candidate c{identity_source::slurm, "the Slurm step environment", {}, {}, {}, {}, {}, {}};
  c.world_size = read_size(env, "SLURM_STEP_NUM_TASKS");
  c.num_nodes = read_size(env, "SLURM_STEP_NUM_NODES");
  c.rank = read_count(env, "SLURM_PROCID");
  c.local_rank = read_count(env, "SLURM_LOCALID");
  c.node_rank = read_count(env, "SLURM_NODEID");
  const auto layout_text = *env.get("SLURM_STEP_TASKS_PER_NODE");
  const auto layout = parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", layout_text);
  const auto layout_origin = quoted("SLURM_STEP_TASKS_PER_NODE", layout_text);

  require_less(*c.rank, *c.world_size);
  require_less(*c.node_rank, *c.num_nodes);
  if (static_cast<int>(layout.size()) != c.num_nodes->value) {
    fail(fmt::format("{} lists {} nodes but {}", layout_origin, layout.size(), c.num_nodes->origin));
  }
  const long total = std::accumulate(layout.begin(), layout.end(), 0L);
  if (total != c.world_size->value) {
    fail(fmt::format("{} adds up to {} tasks but {}", layout_origin, total, c.world_size->origin));
  }
  c.local_world_size = field{layout[c.node_rank->value], fmt::format("{} at {}", layout_origin, c.node_rank->origin)};
  require_less(*c.local_rank, *c.local_world_size);
  return c;
}

/// Open MPI's mpirun (ORTE in 4.x, PRRTE in 5.x) sets OMPI_COMM_WORLD_* for every process it
/// starts; srun never does. A partial source: it has no node rank.
std::optional<candidate> mpirun_candidate(const environment& env) {
  if (!env.has("OMPI_COMM_WORLD_SIZE")) return std::nullopt;
  require_all_or_none(
      env, "Open MPI mpirun environment",
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  candidate c{identity_source::pmix, "the Open MPI mpirun environment", {}, {}, {}, {}, {}, {}};
  c.world_size = read_size(env, "OMPI_COMM_WORLD_SIZE");
  c.rank = read_count(env, "OMPI_COMM_WORLD_RANK");
  c.local_world_size = read_size(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
  c.local_rank = read_count(env, "OMPI_COMM_WORLD_LOCAL_RANK");
  require_less(*c.rank, *c.world_size);
  require_less(*c.local_rank, *c.local_world_size);
  return c;
}

/// The launcher's own environment source: mpirun's where mpirun started this process, else the
/// Slurm step's. Inside a Slurm allocation, mpirun starts its daemons (orted, prted) with srun, and
/// the ranks they start inherit that daemon step's SLURM_PROCID, SLURM_NODEID, ... which describe
/// the daemons, not this job: they are not checked then (docs/launchers.md).
std::optional<candidate> launcher_candidate(const environment& env) {
  if (auto c = mpirun_candidate(env)) return c;
  return slurm_candidate(env);
}

/// The torch variables that jobkit itself set (`jobkit exec`, `jobkit env`, `jobkit.torch`), known by
/// JOBKIT_TORCH_VARIABLES, which jobkit sets beside them to "RANK,LOCAL_RANK,WORLD_SIZE,
/// LOCAL_WORLD_SIZE,NODE_RANK,NUMBER_OF_NODES" as it set them. They came from the launcher, so
/// they hold on any layout (uneven, cyclic, arbitrary), where torchrun's rule (as many processes
/// on every node) does not: while every one of them still holds what jobkit set, they are taken
/// with the number of nodes recorded there. A torchrun started under jobkit sets its own values,
/// which then no longer match, and are checked as torchrun's.
std::optional<candidate> jobkit_set_candidate(const environment& env) {
  constexpr std::string_view marker = "JOBKIT_TORCH_VARIABLES";
  const auto recorded = env.get(marker);
  if (!recorded) return std::nullopt;
  std::vector<int> values;
  std::string_view rest = *recorded;
  while (values.size() < 7) {
    const auto comma = rest.find(',');
    const auto part = rest.substr(0, comma);
    int value = -1;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc{} || end != part.data() + part.size() || value < 0) break;
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (values.size() != 6 || values[1] >= values[3] || values[0] >= values[2] || values[4] >= values[5] ||
      values[3] > values[2] || values[5] > values[2]) {
    fail(
        fmt::format("{} is not six counts RANK,LOCAL_RANK,WORLD_SIZE,LOCAL_WORLD_SIZE,NODE_RANK,"
                    "NUMBER_OF_NODES of one identity (jobkit sets it beside the torch variables)",
                    quoted(marker, *recorded)));
  }
  static constexpr std::string_view names[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK"};
  std::optional<field> read[5];
  for (std::size_t i = 0; i < 5; ++i) {
    const auto value = env.get(names[i]);
    if (!value || *value != std::to_string(values[i])) return std::nullopt;  // not (or no longer) jobkit's
    read[i] = field{values[i], quoted(names[i], *value)};
  }
  if (auto group = env.get("GROUP_RANK"); group && *group != std::to_string(values[4])) return std::nullopt;
  candidate c{identity_source::torchrun, "the torch variables jobkit set", {}, {}, {}, {}, {}, {}};
  c.rank = read[0];
  c.local_rank = read[1];
  c.world_size = read[2];
  c.local_world_size = read[3];
  c.node_rank = read[4];
  c.num_nodes = field{values[5], fmt::format("number of nodes {} ({})", values[5], quoted(marker, *recorded))};
  return c;
}

std::optional<candidate> torchrun_candidate(const environment& env) {
  static const std::vector<std::string_view> names = {"RANK",      "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                      "NODE_RANK", "GROUP_RANK"};
  if (std::none_of(names.begin(), names.end(), [&](auto n) { return env.has(n); })) {
    return std::nullopt;
  }
  if (auto c = jobkit_set_candidate(env)) return c;
  candidate c{identity_source::torchrun, "the torchrun environment", {}, {}, {}, {}, {}, {}};
  c.rank = read_count(env, "RANK");
  c.world_size = read_size(env, "WORLD_SIZE");
  if (!c.rank || !c.world_size) {
    require_all_or_none(env, "torchrun environment", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
    // Only NODE_RANK or GROUP_RANK is set.
    fail(
        fmt::format("partial torchrun environment: {} is set but RANK, WORLD_SIZE, LOCAL_RANK, "
                    "LOCAL_WORLD_SIZE are not",
                    env.has("NODE_RANK") ? quoted("NODE_RANK", *env.get("NODE_RANK"))
                                         : quoted("GROUP_RANK", *env.get("GROUP_RANK"))));
  }
  require_less(*c.rank, *c.world_size);

  c.local_rank = read_count(env, "LOCAL_RANK");
  c.local_world_size = read_size(env, "LOCAL_WORLD_SIZE");
  if (!c.local_rank || !c.local_world_size) {
    if (c.world_size->value > 1 || c.local_rank || c.local_world_size) {
      require_all_or_none(env, "torchrun environment", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
    }
    c.local_rank = field{0, "(implied by WORLD_SIZE=1)"};
    c.local_world_size = field{1, "(implied by WORLD_SIZE=1)"};
  }
  require_less(*c.local_rank, *c.local_world_size);
  if (c.local_world_size->value > c.world_size->value) {
    fail(fmt::format("{} must not exceed {}", c.local_world_size->origin, c.world_size->origin));
  }
  if (c.world_size->value % c.local_world_size->value != 0) {
    fail(
        fmt::format("{} is not a multiple of {}: torchrun starts the same number of processes on "
                    "every node",
                    c.world_size->origin, c.local_world_size->origin));
  }
  c.num_nodes = field{c.world_size->value / c.local_world_size->value,
                      fmt::format("{} / {}", c.world_size->origin, c.local_world_size->origin)};

  auto node_rank = read_count(env, "NODE_RANK");
  auto group_rank = read_count(env, "GROUP_RANK");
  if (node_rank && group_rank && node_rank->value != group_rank->value) {
    fail(fmt::format("{} contradicts {}", node_rank->origin, group_rank->origin));
  }
  c.node_rank = node_rank ? node_rank : group_rank;
  if (!c.node_rank) {
    if (c.num_nodes->value > 1) {
      fail(
          fmt::format("partial torchrun environment: {} and {} describe {} nodes but neither "
                      "NODE_RANK nor GROUP_RANK is set",
                      c.world_size->origin, c.local_world_size->origin, c.num_nodes->value));
    }
    c.node_rank = field{0, "(implied by a single node)"};
  }
  require_less(*c.node_rank, *c.num_nodes);
  return c;
}

std::optional<candidate> pmix_rank_candidate(const environment& env) {
  auto rank = read_count(env, "PMIX_RANK");
  if (!rank) return std::nullopt;
  candidate c{identity_source::pmix, "PMIX_RANK", {}, {}, {}, {}, {}, {}};
  c.rank = rank;
  return c;
}

candidate pmix_candidate(const pmix_facts& facts) {
  auto from = [](int value, std::string_view key) { return field{value, fmt::format("PMIx {}={}", key, value)}; };
  candidate c{identity_source::pmix, "PMIx", {}, {}, {}, {}, {}, {}};
  c.rank = from(facts.rank, "rank");
  c.world_size = from(facts.world_size, "PMIX_JOB_SIZE");
  c.local_rank = from(facts.local_rank, "PMIX_LOCAL_RANK");
  c.local_world_size = from(facts.local_world_size, "PMIX_LOCAL_SIZE");
  const std::string node_origin = facts.node_origin.empty() ? "PMIX_NODEID" : facts.node_origin;
  c.node_rank = field{facts.node_rank, fmt::format("PMIx node rank {} ({})", facts.node_rank, node_origin)};
  c.num_nodes = field{facts.num_nodes, fmt::format("PMIx number of nodes {} ({})", facts.num_nodes, node_origin)};
  auto invalid = [](const std::string& what) {
    throw error(errc::pmix, fmt::format("the PMIx server reported an inconsistent identity: {}", what));
  };
  if (facts.world_size < 1 || facts.local_world_size < 1 || facts.num_nodes < 1) {
    invalid(fmt::format("{}, {}, {}", c.world_size->origin, c.local_world_size->origin, c.num_nodes->origin));
  }
  for (auto [index, bound] :
       {std::pair{&c.rank, &c.world_size}, {&c.local_rank, &c.local_world_size}, {&c.node_rank, &c.num_nodes}}) {
    if ((*index)->value < 0 || (*index)->value >= (*bound)->value) {
      invalid(fmt::format("{} is not below {}", (*index)->origin, (*bound)->origin));
    }
  }
  if (!facts.local_peers.empty()) {
    const auto& peers = facts.local_peers;
    // Not in local-rank order under Open MPI 5's mpirun (PRRTE served "0,2,1" on one node): only
    // the count and this rank's presence are checked (docs/launchers.md).
    if (static_cast<int>(peers.size()) != facts.local_world_size ||
        std::count(peers.begin(), peers.end(), facts.rank) != 1) {
      invalid(fmt::format("PMIX_LOCAL_PEERS={} does not hold rank {} once among {} ranks (PMIX_LOCAL_SIZE)",
                          fmt::join(peers, ","), facts.rank, facts.local_world_size));
    }
  }
  return c;
}

std::optional<candidate> pmi_rank_candidate(const environment& env) {
  auto rank = read_count(env, "PMI_RANK");
  auto size = read_size(env, "PMI_SIZE");
  if (!rank || !size) return std::nullopt;
  candidate c{identity_source::pmi2, "PMI_RANK", {}, {}, {}, {}, {}, {}};
  c.rank = rank;
  c.world_size = size;
  require_less(*c.rank, *c.world_size);
  return c;
}

/// Rank and size from PMI2_Init; node rank, local rank, local world size and number of nodes from
/// PMI_process_mapping, or from the Slurm step variables where the mapping cannot be used.
candidate pmi2_candidate(const environment& env, const pmi2_facts& facts) {
  candidate c{identity_source::pmi2, "PMI-2", {}, {}, {}, {}, {}, {}};
  c.rank = field{facts.rank, fmt::format("PMI-2 rank={}", facts.rank)};
  c.world_size = field{facts.world_size, fmt::format("PMI-2 size={}", facts.world_size)};
  std::string unused;  // why the mapping is not used
  const auto distribution = env.get("SLURM_DISTRIBUTION");
  if (distribution && distribution->starts_with("arbitrary")) {
    // Slurm's mpi/pmi2 (setup.c, 22.05 to 25.x) serves "(vector,(0,N,1))" for this distribution:
    // every task on a node of its own.
    unused = fmt::format("{}: Slurm's mpi/pmi2 then reports every task on a node of its own in PMI_process_mapping",
                         quoted("SLURM_DISTRIBUTION", *distribution));
  } else if (!facts.process_mapping) {
    unused = facts.mapping_problem;
  }
  if (unused.empty()) {
    const auto& text = *facts.process_mapping;
    const auto place = place_of(parse_process_mapping(text, facts.world_size), facts.rank);
    const auto origin = [&](std::string_view what, int value) {
      return field{value, fmt::format("{} {} in PMI_process_mapping='{}'", what, value,
                                      text.size() <= 60 ? text : text.substr(0, 60) + "...")};
    };
    c.node_rank = origin("node", place.node_rank);
    c.local_rank = origin("local rank", place.local_rank);
    c.local_world_size = origin("local size", place.local_world_size);
    c.num_nodes = origin("nodes", place.num_nodes);
    return c;
  }
  auto slurm = slurm_candidate(env);
  if (!slurm) {
    throw error(errc::pmix,
                fmt::format("under PMI-2 the node rank, local rank and local world size come from "
                            "PMI_process_mapping or the Slurm step variables, and neither is usable: {}, and "
                            "SLURM_STEP_NUM_TASKS is not set",
                            unused));
  }
  c.node_rank = slurm->node_rank;
  c.local_rank = slurm->local_rank;
  c.local_world_size = slurm->local_world_size;
  c.num_nodes = slurm->num_nodes;
  return c;
}

std::string spawn_hint(const environment& env, const candidate& a, const candidate& b) {
  const bool torchrun_involved = a.source == identity_source::torchrun || b.source == identity_source::torchrun;
  if (!torchrun_involved) {
    return " The Slurm variables do not describe this PMIx job: they were probably inherited from "
           "another job step.";
  }
  return fmt::format(
      " Several processes seem to run inside one Slurm task ({}inside srun): each inherits the "
      "task's SLURM_PROCID/PMIX_RANK/PMI_RANK. Launch one process per rank with srun "
      "(--ntasks-per-node=N), or set JOBKIT_IDENTITY=torchrun to trust RANK and WORLD_SIZE.",
      env.has("TORCHELASTIC_RUN_ID") ? "torchrun " : "a process launcher ");
}

void check_agreement(const environment& env, const std::vector<candidate>& candidates) {
  using member = std::optional<field> candidate::*;
  static const std::pair<member, const char*> fields[] = {{&candidate::rank, "rank"},
                                                          {&candidate::world_size, "world size"},
                                                          {&candidate::local_rank, "local rank"},
                                                          {&candidate::local_world_size, "local world size"},
                                                          {&candidate::node_rank, "node rank"},
                                                          {&candidate::num_nodes, "number of nodes"}};
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    for (std::size_t j = i + 1; j < candidates.size(); ++j) {
      const auto& a = candidates[i];
      const auto& b = candidates[j];
      std::vector<std::string> mismatches;
      for (const auto& [m, what] : fields) {
        if ((a.*m) && (b.*m) && (a.*m)->value != (b.*m)->value) {
          mismatches.push_back(fmt::format("{} {} vs {}", what, (a.*m)->origin, (b.*m)->origin));
        }
      }
      if (!mismatches.empty()) {
        fail(fmt::format("{} contradicts {}: {}.{}", b.name, a.name, join(mismatches, "; "), spawn_hint(env, a, b)));
      }
    }
  }
}

identity from_candidate(const candidate& c) {
  identity id;
  id.source = c.source;
  id.rank = c.rank->value;
  id.world_size = c.world_size->value;
  id.local_rank = c.local_rank->value;
  id.local_world_size = c.local_world_size->value;
  id.node_rank = c.node_rank->value;
  id.num_nodes = c.num_nodes->value;
  return id;
}

}  // namespace

source_request requested_source(const environment& env) {
  auto value = env.get("JOBKIT_IDENTITY");
  if (!value || value->empty() || *value == "auto") return source_request::automatic;
  if (*value == "pmix") return source_request::pmix;
  if (*value == "pmi2") return source_request::pmi2;
  if (*value == "slurm") return source_request::slurm;
  if (*value == "torchrun") return source_request::torchrun;
  if (*value == "default") return source_request::defaults;
  throw error(errc::invalid_argument, fmt::format("{} is not one of auto, pmix, pmi2, slurm, torchrun, default",
                                                  quoted("JOBKIT_IDENTITY", *value)));
}

bool pmix_server_advertised(const environment& env) { return env.has("PMIX_RANK") && env.has("PMIX_NAMESPACE"); }

bool pmi2_server_advertised(const environment& env) {
  return env.has("PMI_FD") && env.has("PMI_RANK") && env.has("PMI_SIZE");
}

int parse_count(std::string_view name, std::string_view value) {
  if (!value.empty() && value.front() == '-' && value.size() > 1 &&
      std::all_of(value.begin() + 1, value.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    fail(fmt::format("{} is negative", quoted(name, value)));
  }
  if (value.empty() || !std::all_of(value.begin(), value.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    fail(fmt::format("{} is not a non-negative integer", quoted(name, value)));
  }
  int result = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), result);
  if (ec != std::errc{} || end != value.data() + value.size()) {
    fail(fmt::format("{} is out of range (at most {})", quoted(name, value), INT_MAX));
  }
  return result;
}

std::vector<int> parse_tasks_per_node(std::string_view name, std::string_view value) {
  auto bad = [&](std::string_view why) -> std::vector<int> {
    fail(fmt::format("{} cannot be parsed: {} (expected a form like '4,2,1' or '2(x3),1')", quoted(name, value), why));
  };
  auto read_number = [&](std::string_view& rest) -> long {
    const auto number = take_decimal(rest);
    if (!number)
      bad(rest.empty() || rest.front() < '0' || rest.front() > '9' ? "a count is missing" : "a count is out of range");
    return *number;
  };
  std::vector<int> per_node;
  std::string_view rest = value;
  if (rest.empty()) bad("it is empty");
  while (true) {
    const long tasks = read_number(rest);
    if (tasks < 1) bad("a node has no tasks");
    long repeat = 1;
    if (rest.starts_with("(x")) {
      rest.remove_prefix(2);
      repeat = read_number(rest);
      if (!rest.starts_with(")")) bad("a '(x' is not closed");
      rest.remove_prefix(1);
      if (repeat < 1) bad("a repeat count is 0");
    }
    if (static_cast<long>(per_node.size()) + repeat > 1'000'000) bad("too many nodes");
    per_node.insert(per_node.end(), static_cast<std::size_t>(repeat), static_cast<int>(tasks));
    if (rest.empty()) break;
    if (rest.front() != ',') bad(fmt::format("unexpected '{}'", rest.front()));
    rest.remove_prefix(1);
  }
  return per_node;
}

void check_environment_before_pmix(const environment& env) {
  if (requested_source(env) != source_request::automatic) return;
  // Complete sources first, so a contradiction is reported with every field that differs.
  std::vector<candidate> candidates;
  for (auto c : {launcher_candidate(env), torchrun_candidate(env), pmix_rank_candidate(env), pmi_rank_candidate(env)}) {
    if (c) candidates.push_back(std::move(*c));
  }
  check_agreement(env, candidates);
}

identity resolve_identity(const environment& env, const pmix_facts* pmix, std::string hostname,
                          const pmi2_facts* pmi2) {
  std::optional<candidate> truth;
  switch (requested_source(env)) {
    case source_request::defaults: break;
    case source_request::pmix:
      if (!pmix) fail("JOBKIT_IDENTITY='pmix' but no PMIx server is connected");
      truth = pmix_candidate(*pmix);
      break;
    case source_request::pmi2:
      if (!pmi2) fail("JOBKIT_IDENTITY='pmi2' but no PMI-2 server is connected");
      truth = pmi2_candidate(env, *pmi2);
      break;
    case source_request::slurm:
      truth = slurm_candidate(env);
      if (!truth) fail("JOBKIT_IDENTITY='slurm' but SLURM_STEP_NUM_TASKS is not set (not in an srun step)");
      break;
    case source_request::torchrun:
      truth = torchrun_candidate(env);
      if (!truth) fail("JOBKIT_IDENTITY='torchrun' but RANK and WORLD_SIZE are not set");
      break;
    case source_request::automatic: {
      std::vector<candidate> found;
      if (pmix) found.push_back(pmix_candidate(*pmix));
      if (pmi2) found.push_back(pmi2_candidate(env, *pmi2));
      // Without PMIx, mpirun's partial source cannot be the truth: the Slurm step's is the first.
      for (auto c : {pmix ? launcher_candidate(env) : slurm_candidate(env), torchrun_candidate(env)}) {
        if (c) found.push_back(std::move(*c));
      }
      check_agreement(env, found);
      if (!found.empty()) truth = found.front();
      break;
    }
  }

  identity id = truth ? from_candidate(*truth) : identity{};
  id.hostname = std::move(hostname);
  if (id.source != identity_source::defaults) {
    if (auto job = env.get("SLURM_JOB_ID")) {
      id.job_id = *job;
    } else if (id.source == identity_source::pmix) {
      id.job_id = pmix->nspace;
    } else if (id.source == identity_source::pmi2) {
      id.job_id = pmi2->job_id;
    } else if (auto run = env.get("TORCHELASTIC_RUN_ID")) {
      id.job_id = *run;
    }
    id.step_id = env.get("SLURM_STEP_ID").value_or("");
  }
  // A batch script is in a job without being a rank of a step: it still needs these (requeue).
  if (auto restarts = env.get("SLURM_RESTART_COUNT")) id.restart_count = parse_count("SLURM_RESTART_COUNT", *restarts);
  require_all_or_none(env, "Slurm array job", {"SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"});
  if (auto array_job = env.get("SLURM_ARRAY_JOB_ID")) {
    parse_count("SLURM_ARRAY_JOB_ID", *array_job);
    id.array_job_id = *array_job;
    id.array_task_id = parse_count("SLURM_ARRAY_TASK_ID", *env.get("SLURM_ARRAY_TASK_ID"));
  }
  id.component_rank = id.rank;
  id.component_size = id.world_size;
  // A heterogeneous job's component, when this identity is the Slurm step's: not that of
  // mpirun's daemons, nor of a torchrun inside a task.
  const bool from_launcher =
      id.source == identity_source::pmix || id.source == identity_source::pmi2 || id.source == identity_source::slurm;
  const bool in_het_job = env.has("SLURM_HET_SIZE") || env.has("SLURM_PACK_SIZE");
  if (const auto step =
          from_launcher && in_het_job && !env.has("OMPI_COMM_WORLD_SIZE") ? slurm_candidate(env) : std::nullopt;
      step && step->rank->value == id.rank && step->world_size->value == id.world_size &&
      step->node_rank->value == id.node_rank) {
    if (auto c = het_component_of(env, id.rank, id.node_rank)) {
      id.component = c->index;
      id.num_components = c->num_components;
      id.component_rank = c->rank;
      id.component_size = c->size;
      id.component_nodes = std::move(c->nodes);
    }
  }
  return id;
}

namespace {
std::string local_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}
}  // namespace

identity discover_identity(const environment& env, std::optional<pmix_session>& pmix,
                           std::optional<pmi2_session>& pmi2) {
  const auto request = requested_source(env);
  const bool automatic = request == source_request::automatic;
  const bool use_pmix = request == source_request::pmix || (automatic && pmix_server_advertised(env));
  const bool use_pmi2 = request == source_request::pmi2 || (automatic && !use_pmix && pmi2_server_advertised(env));
  if (request == source_request::pmix && !pmix_server_advertised(env)) {
    throw error(errc::invalid_environment,
                "JOBKIT_IDENTITY='pmix' but no PMIx server is advertised (PMIX_RANK and "
                "PMIX_NAMESPACE are not set): launch with srun --mpi=pmix or mpirun");
  }
  if (request == source_request::pmi2 && !pmi2_server_advertised(env)) {
    throw error(errc::invalid_environment,
                "JOBKIT_IDENTITY='pmi2' but no PMI-2 server is advertised (PMI_FD, PMI_RANK and PMI_SIZE are "
                "not all set): launch with srun --mpi=pmi2");
  }
  std::optional<pmix_facts> facts;
  std::optional<pmi2_facts> facts2;
  if (use_pmix) {
    check_environment_before_pmix(env);
    pmix.emplace();
    facts = pmix->query_facts();
  } else if (use_pmi2) {
    check_environment_before_pmix(env);
    pmi2.emplace();
    facts2 = pmi2->query_facts();
  }
  return resolve_identity(env, facts ? &*facts : nullptr, local_hostname(), facts2 ? &*facts2 : nullptr);
}

}  // namespace jobkit::detail
