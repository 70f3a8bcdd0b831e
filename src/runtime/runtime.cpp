#include "jobkit/runtime.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>

#include "collectives/group_state.hpp"
#include "core/timeout.hpp"
#include "identity/discovery.hpp"
#include "jobkit/error.hpp"
#include "log/library_log.hpp"
#include "network/fabric.hpp"
#include "pmi2/session.hpp"
#include "pmix/session.hpp"
#include "recovery/events.hpp"
#include "runtime/access.hpp"
#include "transport/tree.hpp"

namespace jobkit {
// Hidden although jobkit::runtime is exported: its typeinfo and vtables (world_connector's, the
// subgroup maker's std::function) are not part of the library's ABI.
struct __attribute__((visibility("hidden"))) runtime::impl {
  std::optional<detail::pmix_session> pmix;
  std::optional<detail::pmi2_session> pmi2;  // where no PMIx server is advertised (srun --mpi=pmi2)
  jobkit::identity id;
  std::unique_ptr<detail::tcp_fabric> fabric;
  std::shared_ptr<detail::group_state> world_state;
  std::optional<group> world, node, leaders, component;
  std::optional<std::pair<errc, std::string>> setup_failure;
  std::shared_ptr<const bool> alive = std::make_shared<const bool>(true);

  /// The world group's connector: this runtime's endpoint exchange and tree (connect below). A
  /// copy of the world group may outlive an explicit runtime: it must not reach a freed one.
  class world_connector final : public detail::group_connector {
   public:
    world_connector(impl& runtime, const std::shared_ptr<const bool>& alive) : runtime_(runtime), alive_(alive) {}
    void connect(detail::group_state&, const detail::time_bound& bound) override {
      if (alive_.expired()) {
        throw error(errc::invalid_argument, "this world group's runtime was destroyed before its first collective");
      }
      runtime_.connect(bound);
    }

   private:
    impl& runtime_;
    std::weak_ptr<const bool> alive_;
  };

  /// The launcher's rendezvous: PMIx, else PMI-2.
  detail::rendezvous& require_rendezvous() {
    if (pmix) return *pmix;
    if (pmi2) return *pmi2;
    throw error(errc::invalid_environment,
                fmt::format("collectives across {} ranks need the launcher's PMIx (or PMI-2) server, but this "
                            "rank's identity came from '{}' variables: launch with srun --mpi=pmix (or mpirun), or "
                            "srun --mpi=pmi2 where Slurm has no mpi/pmix",
                            id.world_size, to_string(id.source)));
  }

  group& world_group() {
    if (!world) {
      if (id.world_size == 1) {
        world = detail::group_over(detail::make_single_rank_group_state(0, id.hostname));
      } else {
        require_rendezvous();
        world_state = std::make_shared<detail::group_state>();
        world_state->world_ranks.resize(static_cast<std::size_t>(id.world_size));
        for (int r = 0; r < id.world_size; ++r) world_state->world_ranks[static_cast<std::size_t>(r)] = r;
        world_state->rank = id.rank;
        world_state->phase = detail::group_phase::pending;
        world_state->pending = std::make_unique<world_connector>(*this, alive);
        world_state->make_subgroup = subgroup_maker();
        world = detail::group_over(world_state);
      }
    }
    return *world;
  }

  /// The endpoint exchange and the world's tree, set up together, so that a rank that dies later
  /// is seen by its world neighbours whatever group the others are busy with.
  detail::tcp_fabric& connect(const detail::time_bound& bound) {
    auto& rendezvous = require_rendezvous();
    if (setup_failure) {
      throw error(setup_failure->first, "the data path is unusable after its setup failed: " + setup_failure->second);
    }
    if (!fabric) {
      world_group();
      try {
        const auto settings = detail::settings_for(id);
        auto created = std::make_unique<detail::tcp_fabric>(rendezvous, id, bound, settings);
        try {
          auto tree = std::make_unique<detail::tcp_tree>(*created, world_state->world_ranks, bound);
          tree->settle_after_first_exchange(*created);
          world_state->link = std::move(tree);
        } catch (const error& e) {
          // Without a fence, a rank that never started is seen here, by its tree neighbours.
          if (created->on_demand() && e.code() == errc::timeout) {
            detail::raise_setup_failure(rendezvous, settings.endpoint_key, id, e);
          }
          throw;
        }
        for (int r = 0; r < id.world_size; ++r) {
          world_state->hosts.push_back(created->host_of(r));
          world_state->local_ranks.push_back(created->placement().local_rank_of[static_cast<std::size_t>(r)]);
        }
        fabric = std::move(created);
        // For `jobkit run`'s ledger: the step's data path is up on every rank this one reached.
        if (id.rank == 0) {
          detail::record_event("world_ready", id.rank, id.hostname, fmt::format(R"("world_size":{})", id.world_size));
        }
      } catch (const error& e) {
        // Its PMIx fence may still be pending and its key is spent: a second attempt cannot
        // match the other ranks.
        setup_failure.emplace(e.code(), e.what());
        throw;
      } catch (const std::exception& e) {  // not jobkit's (no memory, no thread): spent all the same
        setup_failure.emplace(errc::internal, e.what());
        throw;
      }
    }
    return *fabric;
  }

  /// What group::split uses to create its groups; it must not reach a destroyed runtime.
  detail::subgroup_maker subgroup_maker() {
    return [this, alive = std::weak_ptr<const bool>(alive)](const std::vector<int>& ranks,
                                                            const detail::time_bound& bound) {
      if (alive.expired()) throw error(errc::invalid_argument, "this group's runtime was destroyed before the split");
      return make_state(ranks, bound);
    };
  }

  /// The state of a group of these world ranks, connected now.
  std::shared_ptr<detail::group_state> make_state(const std::vector<int>& ranks, const detail::time_bound& bound) {
    if (ranks.size() == 1) return detail::make_single_rank_group_state(ranks.front(), id.hostname);
    return detail::make_tcp_group_state(connect(bound), ranks, bound, subgroup_maker());
  }
  group make(const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
    return detail::group_over(make_state(ranks, timeout));
  }
};

namespace {
// The process's runtime in use: the first one alive (explicit, or default_runtime()'s own).
// default_runtime() is that one while it lives, so that the library, its logging included, never
// makes a second PMIx client beside a program's own runtime.
std::mutex runtime_in_use_lock;
runtime* runtime_in_use = nullptr;
}  // namespace

runtime::runtime() : impl_(std::make_unique<impl>()) {
  impl_->id = detail::discover_identity(detail::process_environment(), impl_->pmix, impl_->pmi2);
  const std::scoped_lock hold(runtime_in_use_lock);
  if (runtime_in_use == nullptr) {
    runtime_in_use = this;
    detail::set_identity_in_use(&impl_->id);
  }
}

runtime::~runtime() {
  const std::scoped_lock hold(runtime_in_use_lock);
  if (runtime_in_use == this) {
    runtime_in_use = nullptr;
    detail::set_identity_in_use(nullptr);
  }
}

runtime::runtime(runtime&& other) noexcept : impl_(std::move(other.impl_)) {
  const std::scoped_lock hold(runtime_in_use_lock);
  if (runtime_in_use == &other) runtime_in_use = this;  // the identity lives in impl_, which did not move
}

runtime& runtime::operator=(runtime&& other) noexcept {
  if (this == &other) return *this;
  auto ended = std::move(impl_);  // this runtime's own connection: ends below, once nothing points to it
  {
    const std::scoped_lock hold(runtime_in_use_lock);
    impl_ = std::move(other.impl_);
    // The one in use stays in use, here, with the connection it holds now.
    if (runtime_in_use == &other) runtime_in_use = this;
    if (runtime_in_use == this) {
      if (impl_) {
        detail::set_identity_in_use(&impl_->id);
      } else {
        runtime_in_use = nullptr;
        detail::set_identity_in_use(nullptr);
      }
    }
  }
  return *this;
}

const jobkit::identity& runtime::identity() const noexcept { return impl_->id; }

bool runtime::connected_to_pmix() const noexcept { return impl_->pmix.has_value(); }

group& runtime::world() { return impl_->world_group(); }

std::vector<network_address> runtime::data_path_addresses() const {
  std::vector<network_address> found;
  for (const auto& a : detail::endpoint_interfaces(impl_->id)) found.push_back({a.interface, a.numeric});
  return found;
}

group runtime::make_group(const std::vector<int>& world_ranks, call_options options) {
  const auto& id = impl_->id;
  const auto listed = fmt::format("[{}]", fmt::join(world_ranks, ", "));
  if (world_ranks.empty()) throw error(errc::invalid_argument, "make_group: world_ranks is empty");
  std::set<int> seen;
  for (const int r : world_ranks) {
    if (r < 0 || r >= id.world_size) {
      throw error(errc::invalid_argument,
                  fmt::format("make_group: world_ranks={} holds {}, outside 0 to {}", listed, r, id.world_size - 1));
    }
    if (!seen.insert(r).second) {
      throw error(errc::invalid_argument, fmt::format("make_group: world_ranks={} holds {} twice", listed, r));
    }
  }
  if (!seen.count(id.rank)) {
    throw error(errc::invalid_argument,
                fmt::format("make_group: world_ranks={} does not hold this rank ({}); only members call make_group",
                            listed, id.rank));
  }
  return impl_->make(world_ranks, detail::timeout_of(options.timeout, "make_group"));
}

group& runtime::node_group() {
  if (!impl_->node) {
    const auto& id = impl_->id;
    std::vector<int> ranks{id.rank};
    // Every rank joins the data path's setup here, even one alone on its node: the setup is
    // collective over the whole job, and the others may be waiting in it.
    if (id.world_size > 1) {
      const auto& placed = impl_->connect(detail::default_timeout()).placement();
      const auto my_node = placed.node_of[static_cast<std::size_t>(id.rank)];
      std::vector<std::pair<int, int>> local;  // (local rank, world rank)
      for (int r = 0; r < id.world_size; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (placed.node_of[i] == my_node) local.emplace_back(placed.local_rank_of[i], r);
      }
      std::sort(local.begin(), local.end());
      ranks.clear();
      for (const auto& [local_rank, r] : local) ranks.push_back(r);
    }
    impl_->node = impl_->make(ranks, detail::default_timeout());
  }
  return *impl_->node;
}

group& runtime::component_group() {
  if (!impl_->component) {
    const auto& id = impl_->id;
    std::vector<int> ranks(static_cast<std::size_t>(id.component_size));
    std::iota(ranks.begin(), ranks.end(), id.rank - id.component_rank);  // a component's ranks are consecutive
    // Every rank joins the data path's setup, as in node_group: it is collective over the job.
    if (id.world_size > 1) impl_->connect(detail::default_timeout());
    impl_->component = impl_->make(ranks, detail::default_timeout());
  }
  return *impl_->component;
}

group& runtime::node_leaders_group() {
  if (!impl_->leaders) {
    const auto& id = impl_->id;
    if (id.local_rank != 0) {
      throw error(errc::invalid_argument,
                  fmt::format("node_leaders_group: rank {} has local rank {}; only local rank 0 of each node is "
                              "a member and may call it",
                              id.rank, id.local_rank));
    }
    std::vector<int> ranks{id.rank};
    if (id.world_size > 1) {
      const auto& placed = impl_->connect(detail::default_timeout()).placement();
      std::vector<std::pair<int, int>> leaders;  // (node, world rank)
      for (int r = 0; r < id.world_size; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (placed.local_rank_of[i] == 0) leaders.emplace_back(placed.node_of[i], r);
      }
      std::sort(leaders.begin(), leaders.end());
      ranks.clear();
      for (const auto& [node, r] : leaders) ranks.push_back(r);
    }
    impl_->leaders = impl_->make(ranks, detail::default_timeout());
  }
  return *impl_->leaders;
}

detail::rendezvous* detail::runtime_access::rendezvous_of(runtime& rt) noexcept {
  if (rt.impl_->pmix) return &*rt.impl_->pmix;
  return rt.impl_->pmi2 ? &*rt.impl_->pmi2 : nullptr;
}

std::shared_ptr<const std::atomic<bool>> detail::runtime_access::world_failed_flag(runtime& rt) noexcept {
  const auto& state = rt.impl_->world_state;
  if (!state || !state->link) return nullptr;
  return state->link->failed_flag();
}

runtime& default_runtime() {
  {
    const std::scoped_lock hold(runtime_in_use_lock);
    if (runtime_in_use != nullptr) return *runtime_in_use;
  }
  // Made once, at the first use without a runtime in use; it is in use from then on unless
  // another runtime became so first.
  static runtime instance;
  const std::scoped_lock hold(runtime_in_use_lock);
  if (runtime_in_use == nullptr) {  // another was in use while it was made, and has ended since
    runtime_in_use = &instance;
    detail::set_identity_in_use(&instance.identity());
  }
  return runtime_in_use != nullptr ? *runtime_in_use : instance;
}

const logger& default_logger() {
  static const logger instance(current_identity());
  return instance;
}

std::string rank_prefixed_message(std::string_view message) {
  return rank_prefixed_message(message, current_identity());
}

const identity& current_identity() { return default_runtime().identity(); }

group& world() { return default_runtime().world(); }
group make_group(const std::vector<int>& world_ranks, call_options options) {
  return default_runtime().make_group(world_ranks, options);
}
group& node_group() { return default_runtime().node_group(); }
group& component_group() { return default_runtime().component_group(); }
group& node_leaders_group() { return default_runtime().node_leaders_group(); }

int rank() { return current_identity().rank; }
int world_size() { return current_identity().world_size; }
int local_rank() { return current_identity().local_rank; }
int local_world_size() { return current_identity().local_world_size; }
int node_rank() { return current_identity().node_rank; }
int num_nodes() { return current_identity().num_nodes; }
bool is_main_process() { return current_identity().is_main_process(); }
bool is_local_main_process() { return current_identity().is_local_main_process(); }
bool is_distributed() { return current_identity().is_distributed(); }

}  // namespace jobkit
