#include "jobkit/runtime.hpp"

#include <unistd.h>

#include <climits>
#include <optional>

#include "identity_resolver.hpp"
#include "jobkit/error.hpp"
#include "pmix_session.hpp"

namespace jobkit {
namespace {

std::string local_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

struct runtime::impl {
  std::optional<detail::pmix_session> pmix;
  jobkit::identity id;
};

runtime::runtime() : impl_(std::make_unique<impl>()) {
  const auto& env = detail::process_environment();
  const auto request = detail::requested_source(env);
  const bool use_pmix = request == detail::source_request::pmix ||
                        (request == detail::source_request::automatic &&
                         detail::pmix_server_advertised(env));
  if (request == detail::source_request::pmix && !detail::pmix_server_advertised(env)) {
    throw error(errc::invalid_environment,
                "JOBKIT_IDENTITY='pmix' but no PMIx server is advertised (PMIX_RANK and "
                "PMIX_NAMESPACE are not set): launch with srun --mpi=pmix or mpirun");
  }
  std::optional<detail::pmix_facts> facts;
  if (use_pmix) {
    detail::check_environment_before_pmix(env);
    impl_->pmix.emplace();
    facts = impl_->pmix->query_facts();
  }
  impl_->id = detail::resolve_identity(env, facts ? &*facts : nullptr, local_hostname());
}

runtime::~runtime() = default;
runtime::runtime(runtime&&) noexcept = default;
runtime& runtime::operator=(runtime&&) noexcept = default;

const jobkit::identity& runtime::identity() const noexcept { return impl_->id; }

bool runtime::connected_to_pmix() const noexcept { return impl_->pmix.has_value(); }

runtime& default_runtime() {
  static runtime instance;
  return instance;
}

const identity& current_identity() { return default_runtime().identity(); }

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
