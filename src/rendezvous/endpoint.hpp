#pragma once

// The endpoint each rank publishes through the rendezvous: where it listens (numeric addresses,
// a port) and the secret a connection must prove it knows (see network/handshake.hpp), as one
// text record. Rendezvous data is visible only to the step's processes, so the secret may travel
// there and nowhere else.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace jobkit::detail {

/// Bumped whenever frames or handshake messages change: ranks of different jobkit builds then
/// fail with a clear message instead of misreading each other.
constexpr std::uint32_t protocol_version = 4;

constexpr std::size_t secret_size = 32;
using secret_bytes = std::array<std::byte, secret_size>;

/// Where a rank listens and how to prove membership to it, learnt once through the rendezvous.
struct endpoint {
  int node = 0;
  int local_rank = 0;
  int port = 0;
  std::string host;                    ///< hostname, for messages only
  std::vector<std::string> addresses;  ///< numeric, tried in order
  secret_bytes secret{};
};

constexpr std::size_t max_endpoint_record_size = 4096;
constexpr std::size_t max_endpoint_addresses = 16;

std::string encode_endpoint(int world_rank, const endpoint& e);
/// @throws jobkit::error naming the rank (never the secret) when the record is malformed, was
/// published for another rank, or comes from a jobkit build with another protocol version
endpoint decode_endpoint(std::span<const std::byte> record, int world_rank);

}  // namespace jobkit::detail
