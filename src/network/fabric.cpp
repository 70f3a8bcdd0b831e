#include "network/fabric.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "core/environment.hpp"
#include "core/failure.hpp"
#include "core/lost_node.hpp"
#include "core/names.hpp"
#include "core/sha256.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"
#include "rendezvous/endpoint_turn.hpp"

namespace jobkit::detail {
namespace {

secret_bytes fresh_secret() {
  secret_bytes secret{};
  fill_random(secret);
  return secret;
}

endpoint endpoint_of_self(const identity& self, int port, const fabric_settings& settings, const secret_bytes& secret) {
  endpoint mine;
  mine.node = self.node_rank;
  mine.local_rank = self.local_rank;
  mine.port = port;
  mine.host = self.hostname.empty() ? "unknown" : self.hostname;
  mine.addresses = settings.addresses;
  mine.secret = secret;
  return mine;
}

}  // namespace

std::vector<interface_address> endpoint_interfaces(const identity& self) {
  return choose_endpoint_addresses(process_environment(), self.num_nodes == 1, host_addresses());
}

fabric_settings settings_for(const identity& self) {
  fabric_settings settings;
  for (const auto& a : endpoint_interfaces(self)) settings.addresses.push_back(a.numeric);
  settings.silence_limit = lost_node_timeout();
  settings.endpoint_key = take_endpoint_turn(self, task_of(process_environment(), ::getppid())).key();
  return settings;
}

tcp_fabric::tcp_fabric(rendezvous& rv, const identity& self, const time_bound& bound, fabric_settings settings)
    : rank_(self.rank),
      world_size_(self.world_size),
      log_(self),
      settings_(std::move(settings)),
      secret_(fresh_secret()),
      segment_prefix_("/jobkit-" + job_step_tag(self, ::getpid())),
      acceptor_(settings_.addresses, secret_, self.world_size, settings_.handshake_timeout, settings_.silence_limit,
                log_),
      directory_(rv, self, endpoint_of_self(self, acceptor_.port(), settings_, secret_), settings_.endpoint_key, bound,
                 settings_.silence_limit, log_),
      connector_(self.rank, settings_.handshake_timeout, settings_.silence_limit, log_) {}

tcp_fabric::~tcp_fabric() = default;

std::string tcp_fabric::next_group_key(const std::vector<int>& members) {
  const auto list = fmt::format("{}", fmt::join(members, ","));
  sha256 h;
  h.update(std::as_bytes(std::span(list.data(), list.size())));
  const auto digest = h.finish();
  std::uint64_t short_hash = 0;
  std::memcpy(&short_hash, digest.data(), sizeof short_hash);
  const auto key = fmt::format("{}-{:016x}#{}", members.size(), short_hash, created_[list]++);
  key_members_[key] = members.size() <= 16 ? list
                                           : fmt::format("{} ranks: {}...", members.size(),
                                                         fmt::join(members.begin(), members.begin() + 16, ","));
  return key;
}

std::string tcp_fabric::describe_members(const std::string& key) const {
  const auto it = key_members_.find(key);
  return it == key_members_.end() ? "another group" : fmt::format("group [{}]", it->second);
}

int tcp_fabric::connect(int peer, const std::string& key, steady_clock::time_point deadline) {
  return connector_.connect(directory_.endpoint_of(peer, deadline), peer, key, deadline);
}

std::optional<host_watch::verdict> tcp_fabric::lost_among(const std::vector<int>& missing, host_watch& watch,
                                                          steady_clock::time_point start,
                                                          steady_clock::time_point deadline) {
  const auto now = steady_clock::now();
  if (directory_.settled() && now >= start + host_watch::grace) {
    for (const int peer : missing) {
      if (directory_.known(peer) != nullptr) continue;
      if (auto lost = directory_.unanswered(peer, deadline); !lost.empty()) {
        return host_watch::verdict{peer, std::move(lost)};
      }
    }
  }
  return watch.check(missing, now);
}

std::vector<int> tcp_fabric::accept(const std::vector<int>& peers, const std::string& key,
                                    steady_clock::time_point deadline, std::chrono::milliseconds timeout,
                                    const std::function<void(std::size_t, int, const std::string&)>& tell) {
  std::vector<int> fds(peers.size(), -1);
  const auto start = steady_clock::now();
  // A rank is watched through its endpoint: those not read yet are read once the watch begins
  // (after host_watch::grace), only once every rank is known to have published its own.
  host_watch watch([this](int peer) { return directory_.known(peer); }, settings_.silence_limit, start);
  const auto fail = [&](const std::string& message) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i] < 0) continue;
      if (tell) tell(i, fds[i], message);
      ::close(fds[i]);
    }
  };
  std::vector<int> missing;
  while (true) {
    missing.clear();
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (fds[i] < 0) fds[i] = acceptor_.take(key, peers[i]);
      if (fds[i] < 0) missing.push_back(peers[i]);
    }
    if (missing.empty()) return fds;
    if (const auto lost = lost_among(missing, watch, start, deadline)) {
      std::vector<int> world(static_cast<std::size_t>(world_size_));
      std::vector<std::string> hosts;
      for (int r = 0; r < world_size_; ++r) {
        world[static_cast<std::size_t>(r)] = r;
        hosts.push_back(host_of(r));
      }
      const auto there = ranks_on_node(world, hosts, host_of(lost->peer));
      const auto message = fmt::format("creating {} on {}: {} never connected: {} (its ranks: {})",
                                       describe_members(key), rank_label(rank_, host_of(rank_)),
                                       rank_label(lost->peer, host_of(lost->peer)), lost->why, fmt::join(there, ", "));
      fail(message);
      throw error(errc::peer_failure, message);
    }
    if (steady_clock::now() >= deadline) {
      std::vector<std::string> absent;
      for (const int peer : missing) {
        std::string note;
        for (const auto& other : acceptor_.waiting_groups(peer)) {
          note = fmt::format(", which is creating {} instead", describe_members(other));
        }
        absent.push_back(rank_label(peer, host_of(peer)) + note);
      }
      const auto message = fmt::format("creating {} on {}: no connection from {} within the call's {} s",
                                       describe_members(key), rank_label(rank_, host_of(rank_)),
                                       fmt::join(absent, "; "), std::chrono::duration<double>(timeout).count());
      fail(message);
      throw timeout_error(message);
    }
    acceptor_.wait(std::min(deadline, steady_clock::now() + std::chrono::milliseconds(250)));  // then the watch
  }
}

}  // namespace jobkit::detail
