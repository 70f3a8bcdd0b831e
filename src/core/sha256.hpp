#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace jobkit::detail {

/// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the data path's handshake: a rank
/// proves it knows a peer's secret without sending it.
using sha256_digest = std::array<std::byte, 32>;

class sha256 {
 public:
  sha256();
  void update(std::span<const std::byte> data);
  sha256_digest finish();

 private:
  void compress(const std::byte* block);
  std::array<std::uint32_t, 8> state_;
  std::array<std::byte, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

sha256_digest hmac_sha256(std::span<const std::byte> key, std::span<const std::byte> message);

/// Compares in time independent of where the inputs differ.
bool equal_in_constant_time(std::span<const std::byte> a, std::span<const std::byte> b) noexcept;

}  // namespace jobkit::detail
