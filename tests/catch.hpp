#pragma once
#if __has_include(<catch2/catch_test_macros.hpp>)
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
