#include "jobkit/helpers.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "core/environment.hpp"
#include "core/failure.hpp"
#include "core/timeout.hpp"

namespace jobkit {
namespace detail {

std::string describe_self() {
  const auto& id = current_identity();
  return rank_label(id.rank, id.hostname);
}

bool nested_runs_directly(section_kind wanted, const char* helper, const std::source_location& site) {
  const auto section = current_section();
  if (!section) return false;
  if (section->kind == section_kind::main_only) return true;
  if (section->kind == section_kind::node_leaders && wanted == section_kind::node_leaders) return true;
  throw error(errc::invalid_argument,
              fmt::format("{} at {} is called inside {}: this nesting could wait for ranks that never come "
                          "(see the nesting rule in jobkit/helpers.hpp)",
                          helper, site_text(site), section->where));
}

std::pair<int, int> n_at_a_time_round(std::optional<int> n, call_options options, const std::source_location& site) {
  if (n && *n < 1) throw error(errc::invalid_argument, fmt::format("do_n_at_a_time: n={} must be at least 1", *n));
  const auto& id = current_identity();
  const auto places = world().all_gather(std::make_pair(id.local_rank, id.node_rank), options, site);
  if (!n) {
    int rounds = 0;
    for (const auto& [local_rank, node] : places) rounds = std::max(rounds, local_rank + 1);
    return {id.local_rank, rounds};
  }
  std::vector<std::tuple<int, int, int>> order;  // (local rank, node, rank): each round spreads over the nodes
  for (int r = 0; r < static_cast<int>(places.size()); ++r) {
    order.emplace_back(places[static_cast<std::size_t>(r)].first, places[static_cast<std::size_t>(r)].second, r);
  }
  std::sort(order.begin(), order.end());
  const auto position =
      std::find_if(order.begin(), order.end(), [&](const auto& t) { return std::get<2>(t) == id.rank; }) -
      order.begin();
  const int size = static_cast<int>(order.size());
  return {static_cast<int>(position) / *n, (size + *n - 1) / *n};
}

}  // namespace detail

int fs_local_rank(const std::filesystem::path& dir, call_options options) {
  const auto& env = detail::process_environment();
  const auto& id = current_identity();
  if (const auto value = env.get("FS_LOCAL_RANK")) {
    const bool digits =
        !value->empty() && value->size() < 10 && value->find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      throw error(errc::invalid_environment, fmt::format("FS_LOCAL_RANK='{}' is not a non-negative integer", *value));
    return std::stoi(*value);
  }
  if (env.get("OLMO_SHARED_FS") == "1") return id.rank;
  if (id.world_size == 1) return 0;

  auto& g = world();
  g.setup(options);  // so that a failure to create the probe reaches the others at once
  const auto probe_of = [&](int node) {
    return dir / fmt::format(".jobkit-fs-probe.{}.{}.node{}", id.job_id.empty() ? "nojob" : id.job_id,
                             id.step_id.empty() ? "nostep" : id.step_id, node);
  };
  const auto mine = probe_of(id.node_rank);
  if (id.local_rank == 0) {
    auto create = [&] {
      const int fd = ::open(mine.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        throw error(errc::invalid_argument, fmt::format("fs_local_rank: cannot create a probe file in dir='{}': {}",
                                                        dir.string(), std::strerror(errno)));
      }
      ::close(fd);
    };
    detail::run_or_abort(g, create, "fs_local_rank", std::source_location::current());
  }
  g.barrier(options);
  std::vector<bool> seen(static_cast<std::size_t>(id.num_nodes));
  for (int node = 0; node < id.num_nodes; ++node) {
    std::error_code ignored;
    seen[static_cast<std::size_t>(node)] = std::filesystem::exists(probe_of(node), ignored);
  }
  const auto all = g.all_gather(seen, options);
  if (id.local_rank == 0) ::unlink(mine.c_str());
  return static_cast<int>(std::count(all.begin(), all.begin() + id.rank, seen));
}

}  // namespace jobkit
