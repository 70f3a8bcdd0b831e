// The failures that both media of the tree protocol and its routes report in the same words: who is out of
// step with whom, who never arrived, a payload too large for the data path.

#include "transport/tree_context.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/failure.hpp"
#include "transport/frame.hpp"

namespace jobkit::detail {

std::string tree_context::describe(int group_rank) const {
  const auto g = static_cast<std::size_t>(group_rank);
  return rank_label(members[g], hosts[g]);
}

void tree_context::fail(const exchange& ex, const std::string& message, int origin, errc code) {
  spread_and_raise(in_call(ex.name, ex.site, message), origin, code);
}

void tree_context::spread_and_raise(const std::string& message, int origin, errc code) {
  spreader->spread_abort(message, origin, code);
  raise(code, message);
}

void tree_context::passed_on(const std::string& reason, int origin, errc code, const exchange& ex) {
  spreader->spread_abort(reason, origin, code);
  raise(code, in_call(ex.name, ex.site, reason));
}

void tree_context::out_of_step(const call_site& one, const call_site& other) {
  // Both calls named, this rank's among them: the message needs no other name.
  spread_and_raise(fmt::format("collectives out of step: {} is in {} #{} at {} while {} is in {} #{} at {}",
                               describe(one.group_rank), one.name, one.sequence, one.site, describe(other.group_rank),
                               other.name, other.sequence, other.site),
                   rank, errc::peer_failure);
}

void tree_context::out_of_step(int group_rank, std::string_view name, std::uint64_t seq, std::string_view site,
                               const exchange& ex) {
  out_of_step({group_rank, name, seq, site}, {rank, ex.name, sequence, ex.site});
}

void tree_context::timed_out(const exchange& ex, std::string_view rest) {
  fail(
      ex,
      fmt::format("{} at {} timed out after {} ms on {}{}", ex.name, ex.site, ex.timeout.count(), describe(rank), rest),
      rank, errc::timeout);
}

void tree_context::never_arrived(const exchange& ex, const std::vector<int>& missing) {
  timed_out(ex, fmt::format(": rank(s) {} never arrived (at least one of them "
                            "is late, stuck or in another collective)",
                            fmt::join(missing, ", ")));
}

void tree_context::corrupt_segment(const exchange& ex, std::string_view found, std::string_view due) {
  fail(ex,
       fmt::format("{} found {} in the node's shared memory during {} at {}{}{}: a bug, memory corruption, or two "
                   "jobkit builds in one step",
                   describe(rank), found, ex.name, ex.site, due.empty() ? "" : ", where ", due),
       rank, errc::internal);
}

void tree_context::sizes_differ(const exchange& ex, int group_rank, std::uint64_t theirs, std::uint64_t mine) {
  fail(ex,
       fmt::format("{} at {}: {} passed a buffer of {} bytes but {} one of {} bytes: every member must pass the "
                   "same size",
                   ex.name, ex.site, describe(group_rank), theirs, describe(rank), mine),
       rank, errc::invalid_argument);
}

void tree_context::check_size(std::uint64_t size, const exchange& ex) {
  if (size <= max_payload_size) return;
  fail(ex,
       fmt::format("{} at {}: {} bytes would cross one link of the data path on {}, more than its limit of {} "
                   "bytes per collective (move bulk data with NCCL, or in pieces)",
                   ex.name, ex.site, size, describe(rank), max_payload_size),
       rank, errc::invalid_argument);
}

std::vector<std::byte> all_entries(const std::vector<rank_bytes>& entries) {
  std::vector<const rank_bytes*> all;
  for (const auto& e : entries) all.push_back(&e);
  std::vector<std::byte> out;
  append_entries(out, all);
  return out;
}

void tree_context::step_failed(const exchange& ex, const std::exception_ptr& e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    const auto* known = dynamic_cast<const error*>(&x);
    spreader->spread_abort(fmt::format("{} at {} failed on {}: {}", ex.name, ex.site, describe(rank), x.what()), rank,
                           known ? known->code() : errc::peer_failure);
  } catch (...) {
    spreader->spread_abort(fmt::format("{} at {} failed on {}: an exception that is not a std::exception", ex.name,
                                       ex.site, describe(rank)),
                           rank, errc::peer_failure);
  }
}

}  // namespace jobkit::detail
