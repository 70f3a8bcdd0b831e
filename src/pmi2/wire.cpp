#include "pmi2/wire.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/parse.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

/// The text in a message: quoted, cut after 120 characters.
std::string shown(std::string_view text) {
  constexpr std::size_t limit = 120;
  if (text.size() <= limit) return fmt::format("'{}'", text);
  return fmt::format("'{}...' ({} characters)", text.substr(0, limit), text.size());
}

[[noreturn]] void bad_mapping(std::string_view text, std::string_view why) {
  throw error(errc::pmix,
              fmt::format("the PMI-2 server's PMI_process_mapping {} cannot be used: {}", shown(text), why));
}

bool take(std::string_view& rest, std::string_view token) {
  if (!rest.starts_with(token)) return false;
  rest.remove_prefix(token.size());
  return true;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::vector<int> parse_process_mapping(std::string_view text, int world_size) {
  if (world_size < 1) bad_mapping(text, fmt::format("the job size {} is not positive", world_size));
  if (text.size() > pmi2_max_mapping_chars) {
    bad_mapping(text, fmt::format("it is longer than {} characters (cut short?)", pmi2_max_mapping_chars));
  }
  std::string_view rest = text;
  // Blanks are allowed only around the whole text (MPICH's own parser skips none inside either).
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t' || rest.back() == '\n')) rest.remove_suffix(1);
  if (!take(rest, "(vector")) bad_mapping(text, "it does not start with '(vector'");
  std::vector<int> node_of_rank;
  node_of_rank.reserve(static_cast<std::size_t>(world_size));
  int highest_node = -1;
  while (take(rest, ",(")) {
    const long start = take_decimal(rest).value_or(-1);
    if (start < 0 || !take(rest, ",")) bad_mapping(text, "a triple's first node is not a number");
    const long nodes = take_decimal(rest).value_or(-1);
    if (nodes < 1 || !take(rest, ",")) bad_mapping(text, "a triple's node count is not a positive number");
    const long per_node = take_decimal(rest).value_or(-1);
    if (per_node < 1 || !take(rest, ")")) bad_mapping(text, "a triple's ranks per node is not a positive number");
    // Every number is below 2^31: the products below fit in a long long.
    const long long last_node = static_cast<long long>(start) + nodes - 1;
    if (last_node >= world_size) {
      bad_mapping(text, fmt::format("node {} is named, but {} ranks cannot fill more than {} nodes", last_node,
                                    world_size, world_size));
    }
    const long long ranks = static_cast<long long>(nodes) * per_node;
    if (ranks > static_cast<long long>(world_size) - static_cast<long long>(node_of_rank.size())) {
      bad_mapping(text, fmt::format("it places more than the job's {} ranks", world_size));
    }
    for (long n = start; n <= last_node; ++n) node_of_rank.insert(node_of_rank.end(), per_node, static_cast<int>(n));
    highest_node = std::max(highest_node, static_cast<int>(last_node));
  }
  if (!take(rest, ")") || !rest.empty())
    bad_mapping(text, "it is not a list of '(node,count,ranks)' triples closed by ')'");
  if (node_of_rank.size() != static_cast<std::size_t>(world_size)) {
    bad_mapping(text, fmt::format("it places {} ranks, the job has {}", node_of_rank.size(), world_size));
  }
  std::vector<bool> used(static_cast<std::size_t>(highest_node + 1));
  for (const int n : node_of_rank) used[static_cast<std::size_t>(n)] = true;
  if (const auto gap = std::find(used.begin(), used.end(), false); gap != used.end()) {
    bad_mapping(text, fmt::format("node {} holds no rank, but node {} does", gap - used.begin(), highest_node));
  }
  return node_of_rank;
}

node_place place_of(const std::vector<int>& node_of_rank, int rank) {
  node_place place;
  const auto me = static_cast<std::size_t>(rank);
  place.node_rank = node_of_rank.at(me);
  place.local_rank = static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.begin() + rank, place.node_rank));
  place.local_world_size = static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), place.node_rank));
  place.num_nodes = 1 + *std::max_element(node_of_rank.begin(), node_of_rank.end());
  return place;
}

std::string pmi2_key(std::string_view key, int rank, std::size_t part) {
  const bool allowed = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == ':' || c == '#';
  });
  if (!allowed) {
    throw error(
        errc::invalid_argument,
        fmt::format("the rendezvous key {} is not usable with PMI-2: only letters, digits and ._-:# are", shown(key)));
  }
  auto name = part == 0 ? fmt::format("{}@{}", key, rank) : fmt::format("{}@{}+{}", key, rank, part);
  if (name.size() > pmi2_max_key_chars) {
    throw error(errc::invalid_argument, fmt::format("the rendezvous key {} is too long for PMI-2: '{}' has more "
                                                    "than {} characters",
                                                    shown(key), name, pmi2_max_key_chars));
  }
  return name;
}

std::vector<std::string> encode_pmi2_value(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  constexpr std::size_t bytes_per_part = pmi2_part_hex_chars / 2;
  const std::size_t parts = std::max<std::size_t>(1, (bytes.size() + bytes_per_part - 1) / bytes_per_part);
  if (parts > pmi2_max_parts) {
    throw error(errc::invalid_argument, fmt::format("a rendezvous value of {} bytes is more than PMI-2 can carry "
                                                    "here ({} bytes)",
                                                    bytes.size(), pmi2_max_parts * bytes_per_part));
  }
  std::vector<std::string> out(parts);
  out[0] = fmt::format("{}:", parts);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto& part = out[i / bytes_per_part];
    const auto b = std::to_integer<unsigned>(bytes[i]);
    part += digits[b >> 4];
    part += digits[b & 15];
  }
  return out;
}

std::size_t pmi2_value_parts(std::string_view first) {
  const auto colon = first.find(':');
  std::string_view count = first.substr(0, colon);
  const long parts = colon == std::string_view::npos ? -1 : take_decimal(count).value_or(-1);
  if (parts < 1 || !count.empty() || static_cast<std::size_t>(parts) > pmi2_max_parts) {
    throw error(errc::pmix, fmt::format("a PMI-2 value {} does not start with its number of parts (1 to {}) and ':'",
                                        shown(first), pmi2_max_parts));
  }
  return static_cast<std::size_t>(parts);
}

void decode_pmi2_part(std::string_view part, bool first, std::vector<std::byte>& out) {
  const std::string_view whole = part;
  if (first) part.remove_prefix(part.find(':') + 1);  // checked by pmi2_value_parts
  if (part.size() % 2 != 0 || part.size() > pmi2_part_hex_chars) {
    throw error(errc::pmix, fmt::format("a PMI-2 value part {} is not whole bytes of hex", shown(whole)));
  }
  for (std::size_t i = 0; i < part.size(); i += 2) {
    const int high = hex_digit(part[i]), low = hex_digit(part[i + 1]);
    if (high < 0 || low < 0) {
      throw error(errc::pmix, fmt::format("a PMI-2 value part {} holds a character that is not hex", shown(whole)));
    }
    out.push_back(static_cast<std::byte>(high * 16 + low));
  }
}

}  // namespace jobkit::detail
