#pragma once

// How a connection proves it comes from a rank of the same step. Each rank draws a fresh secret and publishes it with
// its endpoint: rendezvous data is visible only to the step's processes. The listener sends a challenge (a nonce); the
// connecting rank answers with its rank, the group it joins and an HMAC-SHA-256 of both nonces under the listener's
// secret; the listener answers with its own HMAC, so the connecting rank knows it reached the rank it meant. No secret
// ever travels. Integers travel in the host's byte order: every rank of a step runs on one architecture.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/endpoint.hpp"

namespace jobkit::detail {

constexpr std::size_t nonce_size = 16;
constexpr std::size_t mac_size = 32;
constexpr std::size_t max_group_key_size = 128;

using nonce_bytes = std::array<std::byte, nonce_size>;
using mac_bytes = std::array<std::byte, mac_size>;

/// Fresh bytes from the kernel's CSPRNG (getrandom). @throws jobkit::error when it fails
void fill_random(std::span<std::byte> out);

constexpr std::size_t challenge_size = 24;
constexpr std::size_t hello_fixed_size = 64;
constexpr std::size_t welcome_size = 36;

struct challenge_message {
  std::uint32_t version = protocol_version;
  nonce_bytes nonce{};
};
std::array<std::byte, challenge_size> encode_challenge(const challenge_message& c);
/// Empty when the bytes are not a jobkit challenge at all (another service at that address).
std::optional<challenge_message> decode_challenge(std::span<const std::byte, challenge_size> bytes);

struct hello_message {
  std::uint32_t version = protocol_version;
  std::uint32_t world_rank = 0;
  nonce_bytes nonce{};  // the connecting rank's
  mac_bytes mac{};
  std::string group_key;
};
std::vector<std::byte> encode_hello(const hello_message& h);
/// The fixed part of a hello: the message with an empty group key, and how many key bytes follow.
struct hello_start {
  hello_message hello;
  std::size_t key_size;
};
/// Empty when the bytes are not a well-formed hello (bad magic, or a key over the limit).
std::optional<hello_start> decode_hello_start(std::span<const std::byte, hello_fixed_size> bytes);

mac_bytes hello_mac(const secret_bytes& listener_secret, const nonce_bytes& listener_nonce,
                    const nonce_bytes& connector_nonce, std::uint32_t world_rank, std::string_view group_key);
mac_bytes welcome_mac(const secret_bytes& listener_secret, const nonce_bytes& listener_nonce,
                      const nonce_bytes& connector_nonce, std::uint32_t world_rank, std::string_view group_key);
std::array<std::byte, welcome_size> encode_welcome(const mac_bytes& mac);
std::optional<mac_bytes> decode_welcome(std::span<const std::byte, welcome_size> bytes);

}  // namespace jobkit::detail
