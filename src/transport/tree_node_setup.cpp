// tree_node's setup: the leader creates the node's segment and tells each node-mate its name over
// their setup connection (or why it could not); each node-mate maps it and says so; then the
// leader unlinks it and every member watches the others' processes through pidfds.

#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "transport/frame.hpp"
#include "transport/tree_node.hpp"

namespace jobkit::detail {

void tree_node::create(const std::string& name) {
  segment_ = std::make_unique<node_segment>(name, static_cast<int>(mates_.size()), context_.describe(context_.rank));
  segment_->store(segment_->member(0).pid, static_cast<std::uint32_t>(::getpid()));
}

void tree_node::attach(const std::string& name) {
  segment_ = std::make_unique<node_segment>(node_segment::attach, name, static_cast<int>(mates_.size()),
                                            context_.describe(context_.rank));
  segment_->store(segment_->member(index_).pid, static_cast<std::uint32_t>(::getpid()));
}

void tree_node::start_watching() {
  if (!leader()) {
    watched_.emplace_back(static_cast<pid_t>(segment_->load(segment_->member(0).pid)));
    watched_members_.push_back(0);
    return;
  }
  segment_->unlink();  // every node-mate has it mapped: from now on no exit can leave it behind
  for (std::size_t i = 1; i < mates_.size(); ++i) {
    watched_.emplace_back(static_cast<pid_t>(segment_->load(segment_->member(static_cast<int>(i)).pid)));
    watched_members_.push_back(static_cast<int>(i));
  }
}

leader_answer read_leader_answer(int fd, tree_context::time_point deadline) {
  leader_answer answer;
  std::uint32_t size = 0;
  receive_all(fd, &size, sizeof size, deadline);
  if (size == 0) {  // refused: the leader's reason follows
    std::uint32_t length = 0;
    receive_all(fd, &length, sizeof length, deadline);
    answer.refusal.emplace(std::min<std::size_t>(length, max_refusal_size), '\0');
    receive_all(fd, answer.refusal->data(), answer.refusal->size(), deadline);
    return answer;
  }
  if (size > max_segment_name_size) {
    throw error(errc::internal,
                fmt::format("a {}-byte segment name announced (at most {})", size, max_segment_name_size));
  }
  answer.name.resize(size);
  receive_all(fd, answer.name.data(), size, deadline);
  return answer;
}

void tree_node::join(int fd, time_point deadline) {
  const auto began = steady_clock::now();
  const int leader = mates_.front();
  const auto who = context_.describe(context_.rank);
  try {
    leader_answer answer;
    try {
      answer = read_leader_answer(fd, deadline);
    } catch (const error& e) {
      throw error(e.code(), fmt::format("data path setup: {} to {}: {}", context_.describe(leader), who, e.what()));
    }
    if (answer.refusal) throw error(errc::peer_failure, *answer.refusal);
    attach(answer.name);
    const char mapped = 1;
    iovec part{const_cast<char*>(&mapped), 1};
    send_all(fd, &part, 1, deadline);
  } catch (const socket_closed& e) {
    throw error(errc::peer_failure,
                fmt::format("data path setup: {} closed its connection ({}) before {} mapped their node's shared "
                            "memory: the process died or exited",
                            context_.describe(leader), e.why, who));
  } catch (const socket_timeout&) {
    throw timeout_error(
        fmt::format("data path setup timed out after {} ms: {} waited in vain for {} to share their node's shared "
                    "memory (a leader shares it once every node-mate and every child on another node connected)",
                    std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - began).count(), who,
                    context_.describe(leader)));
  }
  start_watching();
}

void tree_node::refuse(int fd, const std::string& why, time_point deadline) noexcept {
  const std::uint32_t none = 0;
  const auto length = static_cast<std::uint32_t>(std::min<std::size_t>(why.size(), max_refusal_size));
  iovec parts[3] = {{const_cast<std::uint32_t*>(&none), sizeof none},
                    {const_cast<std::uint32_t*>(&length), sizeof length},
                    {const_cast<char*>(why.data()), length}};
  try {
    send_all(fd, parts, 3, deadline);
  } catch (...) {
  }
}

void tree_node::share(const std::vector<int>& fds, time_point deadline) {
  std::deque<descriptor> setup;  // closed on return: they were only for the setup
  for (const int fd : fds) setup.emplace_back(fd);
  const auto& name = segment_->name();
  const auto size = static_cast<std::uint32_t>(name.size());
  for (std::size_t i = 0; i < setup.size(); ++i) {
    const auto mate = context_.describe(mates_[i + 1]);
    try {
      iovec parts[2] = {{const_cast<std::uint32_t*>(&size), sizeof size}, {const_cast<char*>(name.data()), size}};
      send_all(setup[i].get(), parts, 2, deadline);
    } catch (const socket_closed& e) {
      throw error(errc::peer_failure, fmt::format("data path setup: {} closed its connection ({}) before it mapped "
                                                  "the node's shared memory: the process died or exited",
                                                  mate, e.why));
    } catch (const socket_timeout&) {
      throw timeout_error(
          fmt::format("data path setup: {} did not take the name of the node's shared memory "
                      "from {} in time",
                      mate, context_.describe(context_.rank)));
    }
  }
  for (std::size_t i = 0; i < setup.size(); ++i) {
    const auto mate = context_.describe(mates_[i + 1]);
    try {
      char mapped = 0;
      receive_all(setup[i].get(), &mapped, 1, deadline);
    } catch (const socket_closed& e) {
      throw error(errc::peer_failure,
                  fmt::format("data path setup: {} could not map the node's shared memory segment {} ({}); its own "
                              "error says why",
                              mate, name, e.why));
    } catch (const socket_timeout&) {
      throw timeout_error(
          fmt::format("data path setup: {} did not map the node's shared memory segment {} in time", mate, name));
    }
  }
  start_watching();
}

}  // namespace jobkit::detail
