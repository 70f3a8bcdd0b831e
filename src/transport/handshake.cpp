#include "transport/handshake.hpp"

#include <sys/random.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/posix_io.hpp"
#include "jobkit/config.hpp"
#include "jobkit/error.hpp"
#include "transport/sha256.hpp"

namespace jobkit::detail {
namespace {

constexpr std::uint32_t challenge_magic = 0x4a4b4843;  // "JKHC"
constexpr std::uint32_t hello_magic = 0x4a4b4848;      // "JKHH"
constexpr std::uint32_t welcome_magic = 0x4a4b4857;    // "JKHW"
constexpr std::string_view record_tag = "jobkit-endpoint";

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

[[noreturn]] void malformed(int world_rank, std::string_view what) {
  throw error(errc::internal,
              fmt::format("data path setup: rank {} published a malformed endpoint ({})", world_rank, what));
}

int parse_int(std::string_view text, int world_rank, std::string_view field, int low, int high) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    malformed(world_rank, fmt::format("{} is not a number from {} to {}", field, low, high));
  }
  return value;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const auto at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
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

std::string encode_endpoint(int world_rank, const endpoint& e) {
  std::string secret_hex;
  for (const auto b : e.secret) secret_hex += fmt::format("{:02x}", static_cast<unsigned>(b));
  return fmt::format("{} {} {} {} {} {} {} {} {} {}", record_tag, protocol_version, JOBKIT_VERSION_STRING, world_rank,
                     e.node, e.local_rank, e.port, secret_hex, e.host, fmt::join(e.addresses, ","));
}

endpoint decode_endpoint(std::span<const std::byte> record, int world_rank) {
  if (record.size() > max_endpoint_record_size) malformed(world_rank, fmt::format("{} bytes", record.size()));
  const std::string_view text(reinterpret_cast<const char*>(record.data()), record.size());
  const auto fields = split(text, ' ');
  if (fields.empty() || fields[0] != record_tag) malformed(world_rank, "no jobkit endpoint tag");
  if (fields.size() >= 3) {
    const auto version = fields[1];
    if (version != std::to_string(protocol_version)) {
      const auto build = fields[2].substr(0, 32);
      throw error(errc::invalid_environment,
                  fmt::format("data path setup: rank {} runs jobkit {} (data path protocol {}), this rank runs jobkit "
                              "{} (protocol {}): every rank of a step must run the same jobkit build",
                              world_rank, build, version.substr(0, 16), JOBKIT_VERSION_STRING, protocol_version));
    }
  }
  if (fields.size() != 10) malformed(world_rank, fmt::format("{} fields instead of 10", fields.size()));
  if (parse_int(fields[3], world_rank, "the rank", 0, INT32_MAX) != world_rank) {
    malformed(world_rank, "published for another rank");
  }
  endpoint e;
  e.node = parse_int(fields[4], world_rank, "the node", 0, INT32_MAX);
  e.local_rank = parse_int(fields[5], world_rank, "the local rank", 0, INT32_MAX);
  e.port = parse_int(fields[6], world_rank, "the port", 1, 65535);
  const auto secret_hex = fields[7];
  if (secret_hex.size() != 2 * secret_size) malformed(world_rank, "a secret of the wrong length");
  for (std::size_t i = 0; i < secret_size; ++i) {
    unsigned value = 0;
    const auto* first = secret_hex.data() + 2 * i;
    const auto [end, ec] = std::from_chars(first, first + 2, value, 16);
    if (ec != std::errc() || end != first + 2) malformed(world_rank, "a secret that is not hexadecimal");
    e.secret[i] = static_cast<std::byte>(value);
  }
  if (fields[8].empty() || fields[8].size() > 255) malformed(world_rank, "no host name");
  e.host = std::string(fields[8]);
  const auto addresses = split(fields[9], ',');
  if (addresses.size() > max_endpoint_addresses) malformed(world_rank, fmt::format("{} addresses", addresses.size()));
  for (const auto a : addresses) {
    if (a.empty() || a.size() > 64 || a.find_first_not_of("0123456789abcdefABCDEF.:") != std::string_view::npos) {
      malformed(world_rank, "an address that is not numeric");
    }
    e.addresses.emplace_back(a);
  }
  return e;
}

}  // namespace jobkit::detail
