#pragma once

// What every fuzz target does with a finding: say it and abort, so that libFuzzer keeps the input.
#include <cstdio>
#include <cstdlib>

[[noreturn]] inline void finding(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}
