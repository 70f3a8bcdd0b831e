#include "rendezvous/endpoint.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <string_view>

#include "jobkit/config.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

constexpr std::string_view record_tag = "jobkit-endpoint";

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
