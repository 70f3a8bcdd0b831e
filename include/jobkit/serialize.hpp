#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "jobkit/error.hpp"
#include "jobkit/export.hpp"

namespace jobkit {

/// Bytes being written for another rank. Values are written in this machine's representation:
/// every rank of a job runs the same binary on the same architecture.
class byte_writer {
 public:
  void write_bytes(const void* data, std::size_t size) {
    // resize + memcpy rather than insert: g++ 12 reports a false -Wstringop-overflow for an insert
    // of a few bytes into an empty vector once enough of a collective is inlined around it.
    if (size == 0) return;
    const auto old = bytes_.size();
    bytes_.resize(old + size);
    std::memcpy(bytes_.data() + old, data, size);
  }
  template <class T>
  void write(const T& value);

  std::vector<std::byte>& bytes() noexcept { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

/// Bytes received from another rank.
class JOBKIT_API byte_reader {
 public:
  explicit byte_reader(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}
  /// @throws jobkit::error (internal) when fewer than size bytes are left
  void read_bytes(void* out, std::size_t size);
  /// @throws jobkit::error (internal) when count elements of at least element_size bytes each
  /// cannot fit in what is left (a corrupt or mismatched count)
  void expect(std::uint64_t count, std::size_t element_size) const;
  template <class T>
  T read();

  std::size_t remaining() const noexcept { return bytes_.size() - at_; }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

/// The customisation point for user types: specialise it with
///   static void write(jobkit::byte_writer&, const T&);
///   static T read(jobkit::byte_reader&);
/// A specialisation takes precedence over the built-in rules below.
template <class T>
struct serializer {};

template <class T>
concept has_serializer = requires(byte_writer& w, byte_reader& r, const T& v) {
  serializer<T>::write(w, v);
  { serializer<T>::read(r) } -> std::same_as<T>;
};

namespace detail {

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};
template <class T>
struct is_pair : std::false_type {};
template <class A, class B>
struct is_pair<std::pair<A, B>> : std::true_type {};
template <class T>
struct is_tuple : std::false_type {};
template <class... T>
struct is_tuple<std::tuple<T...>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_string : std::false_type {};
template <class C, class Tr, class A>
struct is_string<std::basic_string<C, Tr, A>> : std::true_type {};
template <class T>
struct is_view : std::false_type {};
template <class C, class Tr>
struct is_view<std::basic_string_view<C, Tr>> : std::true_type {};
template <class T, std::size_t N>
struct is_view<std::span<T, N>> : std::true_type {};

template <class T>
struct is_map : std::false_type {};
template <class K, class V, class C, class A>
struct is_map<std::map<K, V, C, A>> : std::true_type {};
template <class K, class V, class H, class E, class A>
struct is_map<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <class T>
struct is_set : std::false_type {};
template <class K, class C, class A>
struct is_set<std::set<K, C, A>> : std::true_type {};
template <class K, class H, class E, class A>
struct is_set<std::unordered_set<K, H, E, A>> : std::true_type {};

/// Copied as raw bytes: arithmetic types, enums and trivially copyable structs. Pointers and views
/// are excluded: their bytes mean nothing in another process.
template <class T>
constexpr bool is_raw_v =
    std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> && !std::is_member_pointer_v<T> &&
    !std::is_null_pointer_v<T> && !is_view<T>::value && !std::is_array_v<T> && !is_pair<T>::value &&
    !is_tuple<T>::value && !is_optional<T>::value && !is_std_array<T>::value;

/// Whether every value of T encodes to no bytes (std::tuple<>, std::array<T, 0>, pairs and tuples of
/// those): a count of such elements cannot be checked against the bytes received.
template <class T>
constexpr bool encodes_nothing() {
  if constexpr (has_serializer<T>) {
    return false;
  } else if constexpr (is_std_array<T>::value) {
    return std::tuple_size_v<T> == 0 || encodes_nothing<typename T::value_type>();
  } else if constexpr (is_pair<T>::value || is_tuple<T>::value) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (encodes_nothing<std::tuple_element_t<I, T>>() && ...);
    }
    (std::make_index_sequence<std::tuple_size_v<T>>{});
  } else {
    return false;
  }
}

template <class T>
constexpr bool sendable_v();

template <class Tuple, std::size_t... I>
constexpr bool all_sendable(std::index_sequence<I...>) {
  return (sendable_v<std::tuple_element_t<I, Tuple>>() && ...);
}

template <class T>
constexpr bool sendable_v() {
  if constexpr (has_serializer<T>) {
    return true;
  } else if constexpr (std::is_const_v<T> || std::is_volatile_v<T> || std::is_reference_v<T>) {
    return false;
  } else if constexpr (is_string<T>::value) {
    return std::is_trivially_copyable_v<typename T::value_type>;
  } else if constexpr (is_vector<T>::value || is_set<T>::value || is_optional<T>::value || is_std_array<T>::value) {
    // A count of elements of no bytes could not be checked: a corrupt one would hang or exhaust memory.
    return sendable_v<typename T::value_type>() &&
           !((is_vector<T>::value || is_set<T>::value) && encodes_nothing<typename T::value_type>());
  } else if constexpr (is_map<T>::value) {
    return sendable_v<typename T::key_type>() && sendable_v<typename T::mapped_type>() &&
           !(encodes_nothing<typename T::key_type>() && encodes_nothing<typename T::mapped_type>());
  } else if constexpr (is_pair<T>::value || is_tuple<T>::value) {
    return all_sendable<T>(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else {
    return is_raw_v<T>;
  }
}

}  // namespace detail

/// A type the collectives can send: arithmetic types and enums (exact, never narrowed),
/// std::string, std::vector, std::array, std::pair, std::tuple, std::optional, std::map, std::set
/// and their unordered forms, nested as deep as needed, trivially copyable structs without
/// pointers as members (sent as raw bytes), and any type with a jobkit::serializer specialisation.
/// Not containers of elements that encode to no bytes (std::tuple<>, std::array<T, 0>).
template <class T>
concept sendable = detail::sendable_v<T>();

namespace detail {

template <class T>
void write_value(byte_writer& w, const T& value) {
  if constexpr (has_serializer<T>) {
    serializer<T>::write(w, value);
  } else if constexpr (is_raw_v<T>) {
    w.write_bytes(&value, sizeof value);
  } else if constexpr (is_optional<T>::value) {
    const std::uint8_t engaged = value.has_value();
    w.write_bytes(&engaged, 1);
    if (value) write_value(w, *value);
  } else if constexpr (is_pair<T>::value || is_tuple<T>::value) {
    std::apply([&](const auto&... part) { (write_value(w, part), ...); }, value);
  } else {
    const std::uint64_t count = std::size(value);
    if constexpr (!is_std_array<T>::value) w.write_bytes(&count, sizeof count);
    using element = typename T::value_type;
    if constexpr ((is_string<T>::value || is_vector<T>::value || is_std_array<T>::value) && is_raw_v<element> &&
                  !has_serializer<element> && !std::is_same_v<element, bool>) {
      w.write_bytes(std::data(value), count * sizeof(element));
    } else {
      // As the element type: libc++'s std::vector<bool> hands out a proxy (__bit_const_reference), not a bool.
      for (const auto& element_value : value) write_value<element>(w, element_value);
    }
  }
}

template <class T>
T read_value(byte_reader& r) {
  if constexpr (has_serializer<T>) {
    return serializer<T>::read(r);
  } else if constexpr (std::is_same_v<T, bool>) {
    std::uint8_t byte = 0;  // a byte other than 0 or 1 is no bool: reading it as one is undefined
    r.read_bytes(&byte, 1);
    if (byte > 1) {
      throw error(errc::internal,
                  "received bool is " + std::to_string(byte) + ", neither 0 nor 1 (do all ranks pass the same type?)");
    }
    return byte == 1;
  } else if constexpr (is_raw_v<T>) {
    std::array<std::byte, sizeof(T)> raw;
    r.read_bytes(raw.data(), raw.size());
    return std::bit_cast<T>(raw);
  } else if constexpr (is_optional<T>::value) {
    std::uint8_t engaged = 0;
    r.read_bytes(&engaged, 1);
    if (!engaged) return T{};
    return T{read_value<typename T::value_type>(r)};
  } else if constexpr (is_pair<T>::value || is_tuple<T>::value) {
    // Braced initialisation evaluates left to right.
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return T{read_value<std::tuple_element_t<I, T>>(r)...}; }
    (std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (is_std_array<T>::value) {
    T value;
    for (auto& element_value : value) element_value = read_value<typename T::value_type>(r);
    return value;
  } else {
    std::uint64_t count = 0;
    r.read_bytes(&count, sizeof count);
    using element = typename T::value_type;
    T value;
    if constexpr ((is_string<T>::value || is_vector<T>::value) && is_raw_v<element> && !has_serializer<element> &&
                  !std::is_same_v<element, bool>) {
      r.expect(count, sizeof(element));
      value.resize(count);
      r.read_bytes(value.data(), count * sizeof(element));
    } else if constexpr (is_map<T>::value) {
      for (std::uint64_t i = 0; i < count; ++i) {
        auto key = read_value<typename T::key_type>(r);
        value.emplace(std::move(key), read_value<typename T::mapped_type>(r));
      }
    } else if constexpr (is_set<T>::value) {
      for (std::uint64_t i = 0; i < count; ++i) value.insert(read_value<element>(r));
    } else {
      r.expect(count, 1);  // every element takes a byte at least
      value.reserve(count);
      for (std::uint64_t i = 0; i < count; ++i) value.push_back(read_value<element>(r));
    }
    return value;
  }
}

}  // namespace detail

template <class T>
void byte_writer::write(const T& value) {
  static_assert(sendable<T>, "jobkit cannot send this type: see jobkit::sendable, or specialise jobkit::serializer");
  detail::write_value(*this, value);
}

template <class T>
T byte_reader::read() {
  static_assert(sendable<T>, "jobkit cannot send this type: see jobkit::sendable, or specialise jobkit::serializer");
  return detail::read_value<T>(*this);
}

/// The bytes of one value.
template <sendable T>
std::vector<std::byte> to_bytes(const T& value) {
  byte_writer w;
  w.write(value);
  return std::move(w.bytes());
}

/// A value from bytes written by to_bytes.
/// @throws jobkit::error (internal) when the bytes are too short or too long for T
template <sendable T>
T from_bytes(std::span<const std::byte> bytes);

namespace detail {
[[noreturn]] JOBKIT_API void throw_trailing_bytes(std::size_t remaining);
}

template <sendable T>
T from_bytes(std::span<const std::byte> bytes) {
  byte_reader r(bytes);
  T value = r.read<T>();
  if (r.remaining() != 0) detail::throw_trailing_bytes(r.remaining());
  return value;
}

}  // namespace jobkit
