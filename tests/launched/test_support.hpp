#pragma once
// Shared by the launched test programs.
#include <cstdint>
#include <cstdio>
#include <exception>

#include "jobkit/error.hpp"

/// A 64-bit mixing function: test data (sizes, bytes, roots) that depends on its inputs and is the
/// same on every rank that computes it.
inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/// How a test program ends: the body's status, or one "rank ..." line per failure kind that the
/// test scripts count.
template <class Body>
int report_errors(Body&& body) {
  try {
    return body();
  } catch (const jobkit::timeout_error& e) {
    std::printf("rank timeout_error: %s\n", e.what());
    return 3;
  } catch (const jobkit::error& e) {
    std::printf("rank error: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::printf("rank exception: %s\n", e.what());
    return 4;
  }
}
