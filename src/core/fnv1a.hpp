#pragma once

// FNV-1a, 64 bits: the one short non-cryptographic hash (names of shared memory segments and
// workspaces, a task's stamp). Not for anything a stranger could choose to collide: sha256 is.

#include <cstdint>
#include <string_view>

namespace jobkit::detail {

inline constexpr std::uint64_t fnv1a_basis = 0xcbf29ce484222325ULL;

/// `hash` (fnv1a_basis to begin) with one more byte mixed in.
constexpr std::uint64_t fnv1a(std::uint64_t hash, unsigned char byte) noexcept {
  return (hash ^ byte) * 0x100000001b3ULL;
}
/// `hash` with every byte of `bytes` mixed in, in order.
constexpr std::uint64_t fnv1a(std::uint64_t hash, std::string_view bytes) noexcept {
  for (const char c : bytes) hash = fnv1a(hash, static_cast<unsigned char>(c));
  return hash;
}

}  // namespace jobkit::detail
