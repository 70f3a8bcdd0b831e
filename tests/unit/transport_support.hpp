#pragma once

// What the transport's tests share (tests/unit/test_transport_*.cpp): the real TCP tree over
// loopback with threads as ranks on pretend nodes (an in-memory rendezvous stands in for PMIx), and
// the checks that several routes make of it (a late rank, a root that left, a barrier against a
// broadcast).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "../catch.hpp"
#include "collectives/group_state.hpp"
#include "inprocess_groups.hpp"
#include "jobkit/collectives.hpp"
#include "network/fabric.hpp"
#include "support.hpp"
#include "transport/tree.hpp"

namespace test_support {

using namespace std::chrono_literals;
using jobkit::detail::make_tcp_group_state;
using jobkit::detail::tcp_fabric;

/// Runs fn(fabric, world group) on one thread per rank; nodes[r] is rank r's (pretend) node.
/// before_groups(rank, fabric) runs after the endpoint exchange, before the world group exists.
template <class F, class T = std::invoke_result_t<F&, tcp_fabric&, jobkit::group&>>
std::vector<test_support::outcome<T>> on_tcp_ranks(const std::vector<int>& nodes, F fn,
                                                   std::chrono::milliseconds handshake_timeout = 30s,
                                                   const std::function<void(int, tcp_fabric&)>& before_groups = {}) {
  const int size = static_cast<int>(nodes.size());
  // The step's store serves direct reads: endpoints are read on demand, as under PMIx.
  const inprocess_step step(nodes);
  std::vector<test_support::outcome<T>> outcomes(nodes.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto& out = outcomes[static_cast<std::size_t>(r)];
      try {
        rank_fabric under(step, r, handshake_timeout);
        auto& fabric = under.fabric;
        if (before_groups) before_groups(r, fabric);
        std::vector<int> all(static_cast<std::size_t>(size));
        std::iota(all.begin(), all.end(), 0);
        auto world = jobkit::detail::group_over(make_tcp_group_state(fabric, all, 20s));
        out.value.emplace(fn(fabric, world));
      } catch (const jobkit::error& e) {
        out.error = e.what();
        out.code = e.code();
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

/// Rank 2 of these pretend nodes comes 1.5 s late to call(g), whose deadline is 500 ms: what ranks
/// 0 and 1 got, after checking that both timed out and that `what` is in each message.
template <class Call>
std::string late_rank_2(const std::vector<int>& nodes, Call call, const std::string& what) {
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) std::this_thread::sleep_for(1500ms);
    call(g);
    return true;
  });
  std::string errors;
  for (int r = 0; r < 2; ++r) {
    const auto& o = results[static_cast<std::size_t>(r)];
    INFO(o.error);
    CHECK(o.code == jobkit::errc::timeout);
    CHECK(contains(o.error, what));
    errors += o.error;
  }
  return errors;
}

/// Waits until flag is set, for at most 10 s; returns whether it was.
inline bool wait_for(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!flag && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return flag;
}

/// The root's last call is a broadcast: it destroys its group (and its thread ends) before the
/// others call it. Every rank must get its value.
inline void check_root_that_left(const std::vector<int>& nodes, int root) {
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() != root) std::this_thread::sleep_for(300ms);
    return g.broadcast(g.rank() == root ? 42 : 0, root);
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 42);
  }
}

/// Every rank of these pretend nodes but `odd` broadcasts from rank 0 while `odd` calls a barrier;
/// then all call a barrier. What each got.
inline std::vector<test_support::outcome<bool>> barrier_against_broadcast(const std::vector<int>& nodes, int odd) {
  return on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == odd) {
      g.barrier();
    } else {
      g.broadcast(7, 0);
    }
    g.barrier({.timeout = 10s});
    return true;
  });
}
}  // namespace test_support
