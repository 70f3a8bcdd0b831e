#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace jobkit::detail {

/// CRC-32C (Castagnoli, as iSCSI, ext4 and Lustre use it) of `data`, continuing from `crc`
/// (0 to start). crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept;

}  // namespace jobkit::detail
