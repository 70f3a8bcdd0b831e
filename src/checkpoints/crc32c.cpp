#include "checkpoints/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace jobkit::detail {
namespace {

constexpr std::uint32_t polynomial = 0x82F63B78;  // reflected Castagnoli polynomial

// Slicing by 8: table[k][b] is the CRC of byte b followed by k zero bytes.
constexpr auto make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> table{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? polynomial : 0);
    table[0][b] = crc;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t b = 0; b < 256; ++b) table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xFF];
  }
  return table;
}

constexpr auto tables = make_tables();

#if defined(__x86_64__)
// SSE 4.2's crc32 instruction computes this very CRC (the Castagnoli polynomial, reflected), 8
// bytes at a time. One stream: the instruction's latency bounds it (3 cycles per 8 bytes), about
// ten times the table code. Clang 20 has the instruction as a feature of its own ("crc32", which
// "sse4.2" does not imply there); GCC knows no such feature.
#if defined(__clang__)
#define JOBKIT_CRC32_TARGET __attribute__((target("sse4.2,crc32")))
#else
#define JOBKIT_CRC32_TARGET __attribute__((target("sse4.2")))
#endif
JOBKIT_CRC32_TARGET std::uint32_t crc32c_sse42(std::span<const std::byte> data, std::uint32_t crc) noexcept {
  std::uint64_t state = ~crc;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t n = data.size();
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, sizeof word);
    state = _mm_crc32_u64(state, word);
  }
  auto low = static_cast<std::uint32_t>(state);
  for (; n > 0; ++p, --n) low = _mm_crc32_u8(low, *p);
  return ~low;
}

// CPUID leaf 1, ECX bit 20, by cpuid.h's inline code: __builtin_cpu_supports answers from the
// compiler's runtime library (__cpu_model), which the portable wheel's build does not link as g++'s.
bool has_sse42() noexcept {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_SSE4_2) != 0;
  }();
  return has;
}
#endif

}  // namespace

std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc) noexcept {
  crc = ~crc;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t n = data.size();
  while (n >= 8) {
    const std::uint32_t low =
        crc ^ (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24);
    crc = tables[7][low & 0xFF] ^ tables[6][(low >> 8) & 0xFF] ^ tables[5][(low >> 16) & 0xFF] ^ tables[4][low >> 24] ^
          tables[3][p[4]] ^ tables[2][p[5]] ^ tables[1][p[6]] ^ tables[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ tables[0][(crc ^ *p++) & 0xFF];
  return ~crc;
}

bool crc32c_uses_instruction() noexcept {
#if defined(__x86_64__)
  return has_sse42();
#else
  return false;
#endif
}

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) noexcept {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(data, crc);
#endif
  return crc32c_portable(data, crc);
}

}  // namespace jobkit::detail
