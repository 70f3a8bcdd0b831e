// Fuzz target: jobkit::from_bytes<T> (byte_reader and every built-in serializer) on bytes from
// nowhere, i.e. from a corrupt or mismatched peer. The first input byte picks T from
// serialize_types.hpp; the rest is decoded as a T. Decoding must either give a value or throw
// jobkit::error (any other exception, a crash or a sanitizer report is a finding). A decoded value
// must round-trip: its encoding decodes again to an equivalent value, that value encodes to the same
// bytes (where the encoding is deterministic), and the encoding is no longer than the input it came
// from (decoding invents nothing).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <typeinfo>

#include "jobkit/error.hpp"
#include "jobkit/serialize.hpp"
#include "serialize_types.hpp"

namespace {

using namespace fuzz_serialize;
namespace jd = jobkit::detail;

[[noreturn]] void fail(const char* type, const char* what) {
  std::fprintf(stderr, "fuzz_serialize: type %s: %s\n", type, what);
  std::abort();
}

template <class T>
struct is_unordered : std::false_type {};
template <class K, class V, class H, class E, class A>
struct is_unordered<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <class K, class H, class E, class A>
struct is_unordered<std::unordered_set<K, H, E, A>> : std::true_type {};

/// Whether encoding a decoded value gives the same bytes every time: not for unordered containers
/// (iteration order depends on insertion history) nor for types with padding bytes (unspecified
/// after std::bit_cast), nor for anything containing them.
template <class T>
constexpr bool deterministic() {
  if constexpr (std::is_same_v<T, long double> || std::is_same_v<T, point> || is_unordered<T>::value) {
    return false;
  } else if constexpr (jd::is_pair<T>::value || jd::is_tuple<T>::value) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (deterministic<std::tuple_element_t<I, T>>() && ...);
    }
    (std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (jd::is_map<T>::value) {
    return deterministic<typename T::key_type>() && deterministic<typename T::mapped_type>();
  } else if constexpr (jd::is_vector<T>::value || jd::is_set<T>::value || jd::is_optional<T>::value ||
                       jd::is_std_array<T>::value || jd::is_string<T>::value) {
    return deterministic<typename T::value_type>();
  } else {
    return true;
  }
}

/// Value equality that holds for NaN (any NaN equals any NaN) and tells -0.0 from 0.0.
template <class T>
bool same(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return a == b && std::signbit(a) == std::signbit(b);
  } else if constexpr (std::is_same_v<T, point>) {
    return same(a.x, b.x) && same(a.y, b.y);
  } else if constexpr (jd::is_pair<T>::value || jd::is_tuple<T>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return (same(std::get<I>(a), std::get<I>(b)) && ...); }
    (std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (jd::is_optional<T>::value) {
    return a.has_value() == b.has_value() && (!a || same(*a, *b));
  } else if constexpr (std::is_same_v<T, std::vector<bool>> || jd::is_string<T>::value) {
    return a == b;
  } else if constexpr (is_unordered<T>::value) {
    if (a.size() != b.size()) return false;
    for (const auto& element : a) {
      if constexpr (jd::is_map<T>::value) {
        const auto found = b.find(element.first);
        if (found == b.end() || !same(element.second, found->second)) return false;
      } else {
        if (!b.contains(element)) return false;
      }
    }
    return true;
  } else if constexpr (jd::is_vector<T>::value || jd::is_std_array<T>::value || jd::is_set<T>::value ||
                       jd::is_map<T>::value) {
    return std::ranges::equal(a, b, [](const auto& x, const auto& y) { return same(x, y); });
  } else {
    return a == b;
  }
}

template <class T>
void check(std::span<const std::byte> input) {
  const char* type = typeid(T).name();
  T value;
  try {
    value = jobkit::from_bytes<T>(input);
  } catch (const jobkit::error&) {
    return;  // refused: the expected answer to most inputs
  } catch (const std::exception& e) {
    fail(type, e.what());  // e.g. std::length_error or std::bad_alloc from a count not checked
  }
  const auto bytes = jobkit::to_bytes(value);
  if (bytes.size() > input.size()) fail(type, "the decoded value encodes to more bytes than it came from");
  T again;
  try {
    again = jobkit::from_bytes<T>(bytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_serialize: %s\n", e.what());
    fail(type, "the encoding of a decoded value does not decode");
  }
  if (!same(value, again)) fail(type, "a decoded value changed through encode and decode");
  if constexpr (deterministic<T>()) {
    if (jobkit::to_bytes(again) != bytes) fail(type, "encoding is not stable through decode and encode");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  types::for_type(data[0] % types::size, [&]<class T>() { check<T>(rest); });
  return 0;
}
