#include "network/connector.hpp"

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cerrno>
#include <vector>

#include "core/backoff.hpp"
#include "core/embedder.hpp"
#include "core/failure.hpp"
#include "core/lost_node.hpp"
#include "core/sha256.hpp"
#include "jobkit/error.hpp"
#include "network/dial.hpp"

namespace jobkit::detail {
namespace {

template <std::size_t N>
bool read_exactly(int fd, std::array<std::byte, N>& out, steady_clock::time_point deadline, std::string& why,
                  bool* transient = nullptr) {
  try {
    receive_all(fd, out.data(), N, deadline);
    return true;
  } catch (const socket_closed& e) {
    why = e.why;
    // Closed or reset before a word: the listener had no room for it (its backlog, its pending
    // handshakes or its file limit), worth another try; not a silent host (ETIMEDOUT).
    if (transient) *transient = e.error_number == 0 || e.error_number == ECONNRESET;
  } catch (const socket_timeout&) {
    why = "no answer in time";
  }
  return false;
}

}  // namespace

std::optional<int> connector::attempt(const endpoint& e, int peer, const std::string& address, const std::string& key,
                                      steady_clock::time_point deadline, std::string& why, bool& transient) {
  transient = false;
  auto d = begin_dial(address, e.port, silence_limit_);
  int connect_errno = d.error;
  const int fd = d.fd;
  if (fd >= 0 && !d.connected) {  // bounded by us, not by the kernel's SYN retries
    try {
      wait_ready(fd, POLLOUT, std::min(deadline, steady_clock::now() + silence_limit_));
      connect_errno = dial_outcome(fd);
    } catch (const socket_timeout&) {
      connect_errno = ETIMEDOUT;
    } catch (const socket_closed& c) {
      connect_errno = c.error_number != 0 ? c.error_number : ECONNRESET;
    }
  }
  auto give_up = [&](std::string reason) -> std::optional<int> {
    if (fd >= 0) ::close(fd);
    why = std::move(reason);
    return std::nullopt;
  };
  if (connect_errno == ETIMEDOUT && steady_clock::now() < deadline) {
    return give_up(describe(lost_node{.node = e.host,
                                      .what = "answered no connection",
                                      .limit = silence_limit_,
                                      .seen_from = {},
                                      .ranks = {},
                                      .detail = {}}));
  }
  if (connect_errno != 0) {
    transient = connect_errno == ECONNREFUSED || connect_errno == ECONNRESET;
    return give_up(fd < 0 && !d.why.empty() ? d.why : errno_text(connect_errno));
  }

  // The peer challenges once it accepts, which may be late: it may be busy elsewhere until then.
  std::array<std::byte, challenge_size> challenge_bytes{};
  if (!read_exactly(fd, challenge_bytes, deadline, why, &transient)) return give_up("no challenge: " + why);
  const auto challenge = decode_challenge(challenge_bytes);
  if (!challenge) return give_up("what answers there is not a jobkit data path");
  if (challenge->version != protocol_version) {
    ::close(fd);
    throw error(errc::invalid_environment,
                fmt::format("data path setup: {} at {} speaks jobkit data path protocol {}, this rank protocol {}: "
                            "every rank of a step must run the same jobkit build",
                            rank_label(peer, e.host), address, challenge->version, protocol_version));
  }
  hello_message hello;
  hello.world_rank = static_cast<std::uint32_t>(rank_);
  hello.group_key = key;
  fill_random(hello.nonce);
  hello.mac = hello_mac(e.secret, challenge->nonce, hello.nonce, hello.world_rank, key);
  auto hello_bytes = encode_hello(hello);
  iovec part{hello_bytes.data(), hello_bytes.size()};
  try {
    send_all(fd, &part, 1, deadline);
  } catch (const socket_closed& c) {
    return give_up("greeting failed: " + c.why);
  } catch (const socket_timeout&) {
    return give_up("greeting timed out");
  }
  std::array<std::byte, welcome_size> welcome_bytes{};
  if (!read_exactly(fd, welcome_bytes, std::min(deadline, steady_clock::now() + handshake_timeout_), why)) {
    return give_up("our proof of membership was refused (" + why + "): a process of another step listens there");
  }
  const auto welcome = decode_welcome(welcome_bytes);
  const auto expected = welcome_mac(e.secret, challenge->nonce, hello.nonce, hello.world_rank, key);
  if (!welcome || !equal_in_constant_time(*welcome, expected)) {
    return give_up("the listener there could not prove it is this step's rank");
  }
  return fd;
}

int connector::connect(const endpoint& e, int peer, const std::string& key, steady_clock::time_point deadline) {
  std::vector<std::string> failures;
  bool refused_everywhere = false;  // every address refused (or reset) the last attempt
  backoff pauses(std::chrono::milliseconds(50), std::chrono::milliseconds(1000),
                 backoff::jitter::half_to_one_and_a_half);
  for (int tried = 1;; ++tried) {
    failures.clear();
    bool retry = true;  // only when every address failed in a way that another try may mend
    for (const auto& address : e.addresses) {
      std::string why;
      bool transient = false;
      if (const auto fd = attempt(e, peer, address, key, deadline, why, transient)) return *fd;
      failures.push_back(fmt::format("{} port {}: {}", address, e.port, why));
      retry = retry && transient;
      if (steady_clock::now() >= deadline) break;
    }
    refused_everywhere = retry;
    if (!retry || tried >= max_attempts) break;
    // A refused or reset connection: the listener had no room yet (a burst of connections
    // beyond its backlog, its file limit). Backoff with jitter, so that a burst spreads out.
    const auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(pauses.next());
    if (steady_clock::now() + pause >= deadline) break;
    log_.debug("data path: cannot connect to {} yet ({}); attempt {} of {} in {} ms", rank_label(peer, e.host),
               fmt::join(failures, "; "), tried + 1, max_attempts, pause.count());
    interruptible_pause_until(pause, deadline);
  }
  auto message =
      fmt::format("data path setup: cannot connect to {}: {}", rank_label(peer, e.host), fmt::join(failures, "; "));
  if (steady_clock::now() >= deadline) throw timeout_error(message);
  if (refused_everywhere) {
    // It published this endpoint, so it reached jobkit in this turn: its listener is gone since.
    message += fmt::format(
        "; it reached jobkit (it published this endpoint) but nothing listens there any more: it ended before "
        "this rank came: either this rank is late and the others' deadline passed before it arrived (every "
        "rank's call has its own timeout, from when that rank made it), or {} failed (its own error says why)",
        rank_label(peer, e.host));
  }
  throw error(errc::peer_failure, message);
}

}  // namespace jobkit::detail
