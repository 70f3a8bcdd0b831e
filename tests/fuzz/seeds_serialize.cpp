// Writes the seed corpus of fuzz_serialize: for every type of serialize_types.hpp, a few real values
// encoded by jobkit::to_bytes, each file being the type's index byte followed by the encoding, and
// fails if one of those encodings does not decode (the meson test 'seeds-serialize').
//   rm tests/fuzz/corpus/serialize/* && build-fuzz/tests/fuzz/seeds_serialize tests/fuzz/corpus/serialize
// (padding bytes of point and long double are whatever the stack held: a regenerated file may differ
// there only).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "jobkit/serialize.hpp"
#include "serialize_types.hpp"

namespace {

using namespace fuzz_serialize;
namespace jd = jobkit::detail;

/// The k-th sample value of T (k = 0, 1, 2); distinct k give distinct values where T has them.
template <class T>
T make(int k) {
  if constexpr (std::is_same_v<T, bool>) {
    return k % 2 == 1;
  } else if constexpr (std::is_floating_point_v<T>) {
    return k == 0 ? T(0) : k == 1 ? T(1) / T(3) : -std::numeric_limits<T>::infinity();
  } else if constexpr (std::is_arithmetic_v<T>) {
    return k == 0 ? T(0) : k == 1 ? T(1) : std::numeric_limits<T>::max();
  } else if constexpr (std::is_same_v<T, color>) {
    return static_cast<color>(k);
  } else if constexpr (std::is_same_v<T, point>) {
    return {make<double>(k), make<std::int32_t>(k)};
  } else if constexpr (jd::is_string<T>::value) {
    static const char* const text[] = {"", "rank 1 of 7", "with\0nul"};
    const std::string s(text[k], k == 2 ? 8 : std::char_traits<char>::length(text[k]));
    return T(s.begin(), s.end());
  } else if constexpr (jd::is_optional<T>::value) {
    if (k == 0) return T{};
    return T{make<typename T::value_type>(k)};
  } else if constexpr (jd::is_pair<T>::value || jd::is_tuple<T>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return T{make<std::tuple_element_t<I, T>>(k)...}; }
    (std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (jd::is_std_array<T>::value) {
    T value{};
    for (std::size_t i = 0; i < value.size(); ++i) value[i] = make<typename T::value_type>((k + int(i)) % 3);
    return value;
  } else if constexpr (jd::is_map<T>::value) {
    T value;
    for (int i = 0; i < k + 1; ++i)
      value.emplace(make<typename T::key_type>(i), make<typename T::mapped_type>((k + i) % 3));
    return value;
  } else if constexpr (jd::is_set<T>::value) {
    T value;
    for (int i = 0; i < k + 1; ++i) value.insert(make<typename T::value_type>(i));
    return value;
  } else {  // vector: k elements (k = 2: three)
    T value;
    for (int i = 0; i < (k == 2 ? 3 : k); ++i) value.push_back(make<typename T::value_type>((k + i) % 3));
    return value;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (writes DIR/<type index>-<k>)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  int written = 0;
  int status = 0;
  for (std::size_t index = 0; index < types::size; ++index) {
    types::for_type(index, [&]<class T>() {
      std::vector<std::vector<std::byte>> seen;
      for (int k = 0; k < 3; ++k) {
        auto bytes = jobkit::to_bytes(make<T>(k));
        try {  // every value jobkit encodes must decode
          (void)jobkit::from_bytes<T>(bytes);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "type %zu, value %d: the encoding of a value does not decode: %s\n", index, k, e.what());
          status = 1;
        }
        bytes.insert(bytes.begin(), static_cast<std::byte>(index));
        if (std::find(seen.begin(), seen.end(), bytes) != seen.end()) continue;
        seen.push_back(bytes);
        char name[32];
        std::snprintf(name, sizeof name, "/%02zu-%d", index, k);
        std::ofstream(dir + name, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        ++written;
      }
    });
  }
  std::printf("%d seeds written to %s\n", written, dir.c_str());
  return status;
}
