#include "network/handshake.hpp"

#include <sys/random.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "core/posix_io.hpp"
#include "core/sha256.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

constexpr std::uint32_t challenge_magic = 0x4a4b4843;  // "JKHC"
constexpr std::uint32_t hello_magic = 0x4a4b4848;      // "JKHH"
constexpr std::uint32_t welcome_magic = 0x4a4b4857;    // "JKHW"

template <class T>
void put_raw(std::byte* at, const T& value) {
  std::memcpy(at, &value, sizeof value);
}
template <class T>
T get_raw(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

mac_bytes handshake_mac(std::string_view purpose, const secret_bytes& secret, const nonce_bytes& listener_nonce,
                        const nonce_bytes& connector_nonce, std::uint32_t world_rank, std::string_view group_key) {
  std::vector<std::byte> message;
  auto append = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    message.insert(message.end(), b, b + n);
  };
  append(purpose.data(), purpose.size());
  append(listener_nonce.data(), listener_nonce.size());
  append(connector_nonce.data(), connector_nonce.size());
  append(&world_rank, sizeof world_rank);
  append(group_key.data(), group_key.size());
  const auto digest = hmac_sha256(secret, message);
  mac_bytes mac;
  std::memcpy(mac.data(), digest.data(), mac.size());
  return mac;
}

}  // namespace

void fill_random(std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw error(errc::io, fmt::format("getrandom: {}", errno_text(errno)), errno);
    }
    done += static_cast<std::size_t>(n);
  }
}

std::array<std::byte, challenge_size> encode_challenge(const challenge_message& c) {
  std::array<std::byte, challenge_size> out{};
  put_raw(out.data(), challenge_magic);
  put_raw(out.data() + 4, c.version);
  std::memcpy(out.data() + 8, c.nonce.data(), nonce_size);
  return out;
}

std::optional<challenge_message> decode_challenge(std::span<const std::byte, challenge_size> bytes) {
  if (get_raw<std::uint32_t>(bytes.data()) != challenge_magic) return std::nullopt;
  challenge_message c;
  c.version = get_raw<std::uint32_t>(bytes.data() + 4);
  std::memcpy(c.nonce.data(), bytes.data() + 8, nonce_size);
  return c;
}

std::vector<std::byte> encode_hello(const hello_message& h) {
  std::vector<std::byte> out(hello_fixed_size + h.group_key.size());
  put_raw(out.data(), hello_magic);
  put_raw(out.data() + 4, h.version);
  put_raw(out.data() + 8, h.world_rank);
  put_raw(out.data() + 12, static_cast<std::uint16_t>(h.group_key.size()));
  std::memcpy(out.data() + 16, h.nonce.data(), nonce_size);
  std::memcpy(out.data() + 32, h.mac.data(), mac_size);
  std::memcpy(out.data() + hello_fixed_size, h.group_key.data(), h.group_key.size());
  return out;
}

std::optional<hello_start> decode_hello_start(std::span<const std::byte, hello_fixed_size> bytes) {
  if (get_raw<std::uint32_t>(bytes.data()) != hello_magic) return std::nullopt;
  hello_start start;
  start.hello.version = get_raw<std::uint32_t>(bytes.data() + 4);
  start.hello.world_rank = get_raw<std::uint32_t>(bytes.data() + 8);
  start.key_size = get_raw<std::uint16_t>(bytes.data() + 12);
  if (start.key_size > max_group_key_size) return std::nullopt;
  std::memcpy(start.hello.nonce.data(), bytes.data() + 16, nonce_size);
  std::memcpy(start.hello.mac.data(), bytes.data() + 32, mac_size);
  return start;
}

mac_bytes hello_mac(const secret_bytes& secret, const nonce_bytes& listener_nonce, const nonce_bytes& connector_nonce,
                    std::uint32_t world_rank, std::string_view group_key) {
  return handshake_mac("jobkit hello", secret, listener_nonce, connector_nonce, world_rank, group_key);
}

mac_bytes welcome_mac(const secret_bytes& secret, const nonce_bytes& listener_nonce, const nonce_bytes& connector_nonce,
                      std::uint32_t world_rank, std::string_view group_key) {
  return handshake_mac("jobkit welcome", secret, listener_nonce, connector_nonce, world_rank, group_key);
}

std::array<std::byte, welcome_size> encode_welcome(const mac_bytes& mac) {
  std::array<std::byte, welcome_size> out{};
  put_raw(out.data(), welcome_magic);
  std::memcpy(out.data() + 4, mac.data(), mac_size);
  return out;
}

std::optional<mac_bytes> decode_welcome(std::span<const std::byte, welcome_size> bytes) {
  if (get_raw<std::uint32_t>(bytes.data()) != welcome_magic) return std::nullopt;
  mac_bytes mac;
  std::memcpy(mac.data(), bytes.data() + 4, mac_size);
  return mac;
}

}  // namespace jobkit::detail
