#include "inprocess_groups.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "collectives/group_state.hpp"

namespace test_support {

using namespace std::chrono_literals;
using jobkit::detail::group_state;

jobkit::identity rank_identity(int rank, const std::vector<int>& nodes) {
  jobkit::identity id;
  id.rank = rank;
  id.world_size = static_cast<int>(nodes.size());
  id.node_rank = nodes[static_cast<std::size_t>(rank)];
  id.num_nodes = *std::max_element(nodes.begin(), nodes.end()) + 1;
  for (int r = 0; r < rank; ++r) id.local_rank += nodes[static_cast<std::size_t>(r)] == id.node_rank;
  id.local_world_size = static_cast<int>(std::count(nodes.begin(), nodes.end(), id.node_rank));
  id.hostname = fmt::format("n{}", id.node_rank);
  return id;
}

inprocess_step::inprocess_step(const std::vector<int>& layout) : nodes(layout) {
  static std::atomic<int> steps{0};
  job = fmt::format("inprocess{}-{}", ::getpid(), steps++);
  store = std::make_shared<memory_rendezvous_store>(static_cast<int>(nodes.size()), nodes);
}

jobkit::identity inprocess_step::identity(int rank) const {
  auto id = rank_identity(rank, nodes);
  id.job_id = job;
  return id;
}

rank_fabric::rank_fabric(const inprocess_step& step, int rank, std::chrono::milliseconds handshake_timeout)
    : rv(step.store, rank),
      fabric(rv, step.identity(rank), 20s, {.addresses = {"127.0.0.1"}, .handshake_timeout = handshake_timeout}) {}

namespace {

/// A group's state and the fabric under it, destroyed in that order.
struct held_state {
  std::shared_ptr<rank_fabric> under;
  std::shared_ptr<group_state> state;
};

std::shared_ptr<group_state> make_state(const std::shared_ptr<rank_fabric>& under, const std::vector<int>& members,
                                        const jobkit::detail::time_bound& bound) {
  auto state = jobkit::detail::make_tcp_group_state(
      under->fabric, members, bound, [under](const std::vector<int>& ranks, const jobkit::detail::time_bound& b) {
        return make_state(under, ranks, b);
      });
  auto held = std::make_shared<held_state>(held_state{under, std::move(state)});
  return {held, held->state.get()};  // owns both, points at the state
}

}  // namespace

std::vector<jobkit::group> inprocess_groups(int size, const std::vector<int>& nodes) {
  const inprocess_step step(nodes.empty() ? std::vector<int>(static_cast<std::size_t>(size), 0) : nodes);
  std::vector<std::shared_ptr<group_state>> states(static_cast<std::size_t>(size));
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::vector<int> all(static_cast<std::size_t>(size));
        std::iota(all.begin(), all.end(), 0);
        states[static_cast<std::size_t>(r)] = make_state(std::make_shared<rank_fabric>(step, r), all, 20s);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!errors[static_cast<std::size_t>(r)].empty()) {
      throw std::runtime_error(fmt::format("the in-process group of {} ranks: rank {}'s setup failed: {}", size, r,
                                           errors[static_cast<std::size_t>(r)]));
    }
  }
  std::vector<jobkit::group> groups;
  for (auto& state : states) groups.push_back(jobkit::detail::group_over(std::move(state)));
  return groups;
}

}  // namespace test_support
