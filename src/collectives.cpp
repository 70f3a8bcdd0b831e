#include "jobkit/collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "environment.hpp"
#include "transport.hpp"

namespace jobkit {

std::string_view to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::prod: return "prod";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    case reduce_op::band: return "band";
    case reduce_op::bor: return "bor";
    case reduce_op::bxor: return "bxor";
  }
  return "unknown";
}

void byte_reader::read_bytes(void* out, std::size_t size) {
  if (size > remaining()) {
    throw error(errc::internal, fmt::format("received value too short: {} more bytes expected, {} left "
                                            "(do all ranks pass the same type?)",
                                            size, remaining()));
  }
  if (size > 0) std::memcpy(out, bytes_.data() + at_, size);
  at_ += size;
}

void byte_reader::expect(std::uint64_t count, std::size_t element_size) const {
  if (element_size > 0 && count > remaining() / element_size) {
    throw error(errc::internal, fmt::format("received value announces {} elements but only {} bytes are left "
                                            "(do all ranks pass the same type?)",
                                            count, remaining()));
  }
}

namespace detail {

void throw_trailing_bytes(std::size_t remaining) {
  throw error(errc::internal,
              fmt::format("received value has {} bytes left over (do all ranks pass the same type?)", remaining));
}

void throw_bitwise_on_floating(reduce_op op) {
  throw error(errc::invalid_argument,
              fmt::format("all_reduce: op={} needs an integral type, not a floating-point one", to_string(op)));
}

std::chrono::milliseconds parse_timeout(const std::string& name, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || errno != 0 || !std::isfinite(seconds) ||
      seconds <= 0 || seconds > 1e9) {
    throw error(errc::invalid_environment,
                fmt::format("{}='{}' is not a positive number of seconds (e.g. 300 or 2.5)", name, value));
  }
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
}

std::chrono::milliseconds default_timeout() {
  static const auto timeout = [] {
    const auto value = process_environment().get("JOBKIT_TIMEOUT");
    return value ? parse_timeout("JOBKIT_TIMEOUT", *value) : std::chrono::milliseconds(1800 * 1000);
  }();
  return timeout;
}

}  // namespace detail

group::group(std::shared_ptr<detail::group_state> state) : state_(std::move(state)) {}

int group::rank() const noexcept { return state_->rank; }
int group::size() const noexcept { return static_cast<int>(state_->world_ranks.size()); }
const std::vector<int>& group::world_ranks() const noexcept { return state_->world_ranks; }

std::string group::describe(int group_rank) const {
  const auto r = static_cast<std::size_t>(group_rank);
  if (r >= state_->hosts.size()) return fmt::format("rank {}", state_->world_ranks.at(r));
  return fmt::format("rank {} ({})", state_->world_ranks.at(r), state_->hosts.at(r));
}

detail::exchange group::make_exchange(std::string name, call_options options,
                                      const std::source_location& site) const {
  if (options.timeout.count() < 0) {
    throw error(errc::invalid_argument,
                fmt::format("{}: timeout={} ms is negative", name, options.timeout.count()));
  }
  detail::exchange ex;
  ex.name = std::move(name);
  ex.site = detail::site_text(site);
  ex.timeout = options.timeout.count() == 0 ? detail::default_timeout() : options.timeout;
  return ex;
}

void group::check_root(std::string_view operation, int root) const {
  if (root < 0 || root >= size()) {
    throw error(errc::invalid_argument,
                fmt::format("{}: root={} is not a rank of this group (ranks 0 to {})", operation, root, size() - 1));
  }
}

void group::connect(const detail::exchange& ex) {
  if (!state_->connect) return;
  std::optional<error> failed;
  try {
    state_->connect(*state_, ex.timeout);
  } catch (const timeout_error& e) {
    failed.emplace(timeout_error(fmt::format("{} at {}: setting up the data path: {}", ex.name, ex.site, e.what()),
                                 e.native_status()));
  } catch (const error& e) {
    failed.emplace(e.code(), fmt::format("{} at {}: setting up the data path: {}", ex.name, ex.site, e.what()),
                   e.native_status());
  }
  if (!failed) {
    state_->connect = nullptr;
    return;
  }
  // The setup's PMIx fence may still be pending and its key is spent: a retry cannot match the
  // other ranks, so the group stays failed.
  const auto code = failed->code();
  const std::string reason = failed->what();
  const int status = failed->native_status();
  state_->connect = [code, reason, status](detail::group_state&, std::chrono::milliseconds) {
    throw error(code, "this group is unusable after an earlier failure: " + reason, status);
  };
  if (code == errc::timeout) throw timeout_error(reason, status);
  throw error(code, reason, status);
}

std::vector<detail::rank_bytes> group::run(detail::exchange& ex) {
  check_section(ex);
  connect(ex);
  return state_->link->run(ex);
}

void group::abort(const std::string& message) noexcept {
  if (state_->link) state_->link->abort(message);
}

void group::fail_from_callable(const detail::exchange& ex) {
  std::string what = "an exception that is not a std::exception";
  try {
    throw;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  try {
    connect(ex);  // the other ranks may be waiting for this one to set up the data path
  } catch (const error&) {
  }
  abort(fmt::format("{} at {}: the callable threw on {}: {}", ex.name, ex.site, describe(rank()), what));
  throw;
}

void group::fail_to_decode(const detail::exchange& ex, int from_rank, const error& e) const {
  throw error(e.code(), fmt::format("{} at {}: the value from {} cannot be read: {}", ex.name, ex.site,
                                    describe(from_rank), e.what()));
}

namespace detail {
namespace {
thread_local std::vector<section_info> sections;
}

std::string site_text(const std::source_location& site) {
  std::string_view file = site.file_name();
  if (const auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return fmt::format("{}:{}", file, site.line());
}

section_guard::section_guard(section_kind kind, std::string helper, const std::source_location& site) {
  sections.push_back({kind, helper + " at " + site_text(site)});
}

section_guard::~section_guard() { sections.pop_back(); }

std::optional<section_info> current_section() {
  if (sections.empty()) return std::nullopt;
  return sections.back();
}

}  // namespace detail

void group::check_section(const detail::exchange& ex) const {
  const auto section = detail::current_section();
  if (!section || size() == 1) return;
  const auto& local = state_->local_ranks;
  if (section->kind == detail::section_kind::node_leaders && !local.empty() &&
      std::all_of(local.begin(), local.end(), [](int r) { return r == 0; })) {
    return;  // every member runs this section too
  }
  const char* who = section->kind == detail::section_kind::main_only      ? "the main rank only"
                    : section->kind == detail::section_kind::node_leaders ? "local rank 0 of each node only"
                                                                          : "one rank at a time";
  throw error(errc::invalid_argument,
              fmt::format("{} at {} on a group of {} ranks is called inside {}, which runs on {}: the other "
                          "members would never arrive (see the nesting rule in jobkit/helpers.hpp)",
                          ex.name, ex.site, size(), section->where, who));
}

void group::check_peers(const std::string& during) {
  if (state_->link) state_->link->check_peers(during);
}

void group::setup(call_options options, std::source_location site) {
  const auto ex = make_exchange("setup", options, site);
  check_section(ex);
  connect(ex);
}

void group::barrier(call_options options, std::source_location site) {
  auto ex = make_exchange("barrier", options, site);
  run(ex);
}

}  // namespace jobkit
