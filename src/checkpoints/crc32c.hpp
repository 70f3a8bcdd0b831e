#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace jobkit::detail {

/// CRC-32C (Castagnoli, as iSCSI, ext4 and Lustre use it) of `data`, continuing from `crc`
/// (0 to start). crc32c("123456789") == 0xE3069283. On x86-64 with SSE 4.2 (checked once, at the
/// first call) by its crc32 instruction, else by crc32c_portable.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept;

/// The same CRC by tables (slicing by 8), on any machine: what crc32c is checked against.
std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept;

/// Whether crc32c uses the machine's instruction on this machine.
bool crc32c_uses_instruction() noexcept;

}  // namespace jobkit::detail
