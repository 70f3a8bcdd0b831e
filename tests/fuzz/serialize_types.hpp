// The types fuzz_serialize.cpp decodes and seeds_serialize.cpp encodes, one per index: the input's
// first byte (modulo the count) picks one. Append new types at the end so that the checked-in corpus
// keeps its meaning (a seed's first byte is its type's index).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace fuzz_serialize {

/// A trivially copyable struct, sent as raw bytes (with 4 bytes of padding after y).
struct point {
  double x;
  std::int32_t y;
};

/// Every value of the underlying type is a valid value of a scoped enum with a fixed type.
enum class color : std::uint8_t { red, green, blue };

using nested = std::vector<std::optional<
    std::tuple<std::string, std::array<std::int32_t, 2>, std::vector<std::pair<std::int8_t, std::string>>>>>;

/// A list of types; for_type calls f.template operator()<T>() for the one at an index.
template <class... T>
struct type_list {
  static constexpr std::size_t size = sizeof...(T);

  template <class F>
  static void for_type(std::size_t index, F&& f) {
    std::size_t i = 0;
    ((i++ == index ? (f.template operator()<T>(), 0) : 0), ...);
  }
};

// clang-format off
using types = type_list<
  bool,                                                       //  0
  char,                                                       //  1
  std::int8_t,                                                //  2
  std::uint16_t,                                              //  3
  std::int32_t,                                               //  4
  std::uint64_t,                                              //  5
  float,                                                      //  6
  double,                                                     //  7
  long double,                                                //  8 (6 bytes of padding on x86-64)
  color,                                                      //  9
  std::string,                                                // 10
  std::u32string,                                             // 11
  std::vector<std::int32_t>,                                  // 12
  std::vector<double>,                                        // 13
  std::vector<bool>,                                          // 14
  std::vector<std::string>,                                   // 15
  std::array<std::uint16_t, 3>,                               // 16
  std::array<std::string, 2>,                                 // 17
  std::pair<std::string, std::int64_t>,                       // 18
  std::tuple<std::int32_t, std::string, std::optional<float>>,// 19
  std::optional<std::string>,                                 // 20
  std::optional<bool>,                                        // 21
  std::map<std::string, std::vector<double>>,                 // 22
  std::map<std::int32_t, std::string>,                        // 23
  std::set<std::int32_t>,                                     // 24
  std::set<std::string>,                                      // 25
  std::unordered_map<std::int32_t, std::string>,              // 26
  std::unordered_map<std::string, std::vector<std::int32_t>>, // 27
  std::unordered_set<std::string>,                            // 28
  std::unordered_set<std::uint64_t>,                          // 29
  point,                                                      // 30
  std::vector<point>,                                         // 31
  std::vector<std::map<std::string, std::vector<double>>>,    // 32
  nested,                                                     // 33
  std::map<std::string, std::set<std::string>>,               // 34
  std::tuple<>,                                               // 35 (encodes to no bytes)
  std::optional<std::array<std::int32_t, 0>>,                 // 36
  std::vector<std::pair<std::tuple<>, bool>>,                 // 37 (elements of one byte)
  std::map<std::tuple<>, std::int8_t>,                        // 38 (at most one key)
  std::array<bool, 3>                                         // 39
>;
// Containers of elements that encode to no bytes (std::vector<std::tuple<>>) are not sendable.
// clang-format on

}  // namespace fuzz_serialize
