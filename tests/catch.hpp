#pragma once
// The build says which Catch2 it found (tests/meson.build): a machine can hold the headers of the
// other major version as well, which __has_include would pick.
#ifndef JOBKIT_CATCH2_V2
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>
// Catch2 3 renamed v2's Catch::Contains to Catch::Matchers::ContainsSubstring; the tests keep
// v2's name so that they build with both (Debian 12 has 2.13, Debian 13 has 3.7).
namespace Catch {
inline Matchers::StringContainsMatcher Contains(const std::string& text,
                                                CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, sensitivity);
}
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
