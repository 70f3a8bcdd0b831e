// How tree_links reports a link that failed: closed, silent, broken, late. Every message names
// the peer, the collective and its call site, and reaches every member as an abort.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>

#include "core/failure.hpp"
#include "core/lost_node.hpp"
#include "core/timeout.hpp"
#include "transport/frame.hpp"
#include "transport/tree_links.hpp"

namespace jobkit::detail {

using clock = steady_clock;

void tree_links::lost(const link& l, const std::string& why, const exchange& ex, int error_number) {
  // The peer may have sent an abort just before closing: its reason is the one to report.
  if (error_number != ETIMEDOUT) {
    try {
      const auto until = clock::now() + std::chrono::milliseconds(100);
      frame f = receive_frame(l.fd, until);
      while (is(f.header, frame_type::receipt)) f = receive_frame(l.fd, until);
      if (auto notice = abort_in(f)) context_.passed_on(notice->reason, notice->origin, notice->code, ex);
    } catch (const socket_closed& c) {
      error_number = c.error_number;  // the kernel's keepalive may have ended the link: ETIMEDOUT
    } catch (const socket_timeout&) {
    } catch (const protocol_violation&) {
    }
  }
  if (error_number == ETIMEDOUT) went_silent(l, ex);
  context_.fail(ex,
                fmt::format("{} closed its connection ({}) during {}{}: the process died or exited",
                            context_.describe(l.peer), why, ex.name, ex.site.empty() ? "" : " at " + ex.site),
                l.peer);
}

void tree_links::went_silent(const link& l, const exchange& ex) {
  const auto& host = context_.hosts[static_cast<std::size_t>(l.peer)];
  const auto& here = context_.hosts[static_cast<std::size_t>(context_.rank)];
  const auto lost = describe(lost_node{.node = host,
                                       .what = "answered nothing",
                                       .limit = lost_node_timeout(),
                                       .seen_from = here,
                                       .ranks = ranks_on_node(context_.members, context_.hosts, host),
                                       .detail = {}});
  context_.fail(ex,
                fmt::format("{} went silent during {}{} while {} waited on it: {}", context_.describe(l.peer), ex.name,
                            ex.site.empty() ? "" : " at " + ex.site, context_.describe(context_.rank), lost),
                l.peer);
}

void tree_links::broke_protocol(const link& l, const protocol_violation& v, const exchange& ex) {
  context_.fail(ex,
                fmt::format("{} sent {} during {}{}: the connection breaks jobkit's data path protocol (a bug, memory "
                            "corruption, or two jobkit builds in one step)",
                            context_.describe(l.peer), v.what, ex.name, ex.site.empty() ? "" : " at " + ex.site),
                context_.rank, errc::internal);
}

void tree_links::time_out(const exchange& ex, const std::vector<bool>& done, std::vector<int> missing) {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (done[i]) continue;
    for (const int g : subtrees_[i]) missing.push_back(context_.members[static_cast<std::size_t>(g)]);
  }
  std::sort(missing.begin(), missing.end());
  context_.never_arrived(ex, missing);
}

void tree_links::message_failed(const link& l, const exchange& ex) {
  try {
    throw;
  } catch (const protocol_violation& v) {
    broke_protocol(l, v, ex);
  } catch (const socket_closed& e) {
    lost(l, e.why, ex, e.error_number);
  } catch (const socket_timeout&) {
    context_.fail(
        ex, fmt::format("{} stalled mid-message during {} at {}", context_.describe(l.peer), ex.name, ex.site), l.peer);
  }
}

void tree_links::send_failed(const link& l, const exchange& ex) {
  try {
    throw;
  } catch (const socket_closed& e) {
    lost(l, e.why, ex, e.error_number);
  } catch (const socket_timeout&) {
    context_.fail(ex, fmt::format("{} stopped reading during {} at {}", context_.describe(l.peer), ex.name, ex.site),
                  l.peer);
  }
}

void tree_links::result_failed(const link& parent, const exchange& ex) {
  try {
    throw;
  } catch (const socket_timeout&) {
    context_.timed_out(ex, fmt::format(" waiting for the result from {}: some rank outside "
                                       "this rank's subtree never arrived",
                                       context_.describe(parent.peer)));
  } catch (...) {
    message_failed(parent, ex);
  }
}

}  // namespace jobkit::detail
