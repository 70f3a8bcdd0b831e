// The CRC-32C of jobkit's checkpoints (src/checkpoints/crc32c.cpp): the machine's instruction, as
// crc32c uses it where the machine has one, against the table code, the same bytes and loop.
//   crc32c_speed [MIB] [REPS]   (defaults 256, 5): MIB MiB of pseudo-random bytes, each way REPS
//   times in turn; one JSON line: the median GB/s of each and whether both gave the same CRC.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoints/crc32c.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::stoul(argv[1]) : 256;
  const int reps = argc > 2 ? std::stoi(argv[2]) : 5;
  std::vector<std::byte> data(mib << 20);
  std::uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  std::vector<double> fast, table;
  bool same = true;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto a = jobkit::detail::crc32c(data);
    const auto t1 = std::chrono::steady_clock::now();
    const auto b = jobkit::detail::crc32c_portable(data);
    const auto t2 = std::chrono::steady_clock::now();
    same = same && a == b;
    fast.push_back(static_cast<double>(data.size()) / std::chrono::duration<double>(t1 - t0).count() / 1e9);
    table.push_back(static_cast<double>(data.size()) / std::chrono::duration<double>(t2 - t1).count() / 1e9);
  }
  std::printf(
      "{\"op\":\"crc32c\",\"mib\":%zu,\"reps\":%d,\"instruction\":%s,\"crc32c_gbps\":%.2f,"
      "\"table_gbps\":%.2f,\"same\":%s}\n",
      mib, reps, jobkit::detail::crc32c_uses_instruction() ? "true" : "false", median(fast), median(table),
      same ? "true" : "false");
  return same ? 0 : 1;
}
