// The element types and reductions of the Python module's array collectives (_elements.hpp).

#include "_elements.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "jobkit/error.hpp"

namespace jobkit_python {

void invalid(const std::string& message) { throw jobkit::error(jobkit::errc::invalid_argument, message); }

namespace {

constexpr std::array<elem_info, 15> elems{{{elem::f16, "float16", 2},
                                           {elem::bf16, "bfloat16", 2},
                                           {elem::f32, "float32", 4},
                                           {elem::f64, "float64", 8},
                                           {elem::c64, "complex64", 8},
                                           {elem::c128, "complex128", 16},
                                           {elem::i8, "int8", 1},
                                           {elem::u8, "uint8", 1},
                                           {elem::i16, "int16", 2},
                                           {elem::u16, "uint16", 2},
                                           {elem::i32, "int32", 4},
                                           {elem::u32, "uint32", 4},
                                           {elem::i64, "int64", 8},
                                           {elem::u64, "uint64", 8},
                                           {elem::b8, "bool", 1}}};

float from_bf16(std::uint16_t v) { return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16); }

std::uint16_t to_bf16(float f) {
  auto bits = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // stays a NaN
  bits += 0x7fff + ((bits >> 16) & 1);                                        // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace

const elem_info& info(elem e) { return elems[static_cast<std::size_t>(e)]; }

elem elem_of(const std::string& name) {
  for (const auto& e : elems) {
    if (name == e.name) return e.type;
  }
  invalid("dtype " + name +
          " is not one jobkit's array collectives take (float16, bfloat16, float32, float64, "
          "complex64, complex128, int8 to int64, uint8 to uint64, bool)");
}

/// The type a reduction works in: float32 for the 16-bit floats, the element itself otherwise.
elem wide(elem e) { return e == elem::f16 || e == elem::bf16 ? elem::f32 : e; }

/// Refuses an op that the dtype has no meaning for, before any communication.
void check_op(elem e, op o, const char* collective) {
  const bool floating = e == elem::f16 || e == elem::bf16 || e == elem::f32 || e == elem::f64;
  const bool complex = e == elem::c64 || e == elem::c128;
  const auto as = complex    ? jobkit::detail::reduced_as::complex
                  : floating ? jobkit::detail::reduced_as::floating
                             : jobkit::detail::reduced_as::integral;
  jobkit::detail::check_reduce_op(collective, o, as, std::string("dtype ") + info(e).name);
}

/// The array's elements in its reduction type (a copy of the bytes, or widened to float32).
std::vector<std::byte> widen(std::span<const std::byte> data, elem e) {
  if (wide(e) == e) return {data.begin(), data.end()};
  const std::size_t n = data.size() / 2;
  std::vector<std::byte> out(n * sizeof(float));
  auto* to = reinterpret_cast<float*>(out.data());
  const auto* from = reinterpret_cast<const std::uint16_t*>(data.data());
  if (e == elem::bf16) {
    for (std::size_t i = 0; i < n; ++i) to[i] = from_bf16(from[i]);
  } else {
    const auto* half = reinterpret_cast<const _Float16*>(data.data());
    for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<float>(half[i]);
  }
  return out;
}

/// Writes reduced values back in the array's own type (rounding a float32 to 16 bits once).
void narrow(std::span<const std::byte> values, elem e, std::byte* to) {
  if (wide(e) == e) {
    std::memcpy(to, values.data(), values.size());
    return;
  }
  const std::size_t n = values.size() / sizeof(float);
  const auto* from = reinterpret_cast<const float*>(values.data());
  if (e == elem::bf16) {
    auto* out = reinterpret_cast<std::uint16_t*>(to);
    for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(from[i]);
  } else {
    auto* out = reinterpret_cast<_Float16*>(to);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<_Float16>(from[i]);
  }
}

namespace {

template <class T>
T combine(T a, T b, op o) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (o) {
      case op::prod: return a * b;
      case op::min: return (std::isnan(a) || a < b) ? a : b;
      case op::max: return (std::isnan(a) || a > b) ? a : b;
      default: return a + b;  // sum, avg
    }
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // sums and products wrap, as torch's do
    switch (o) {
      case op::sum: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case op::prod: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case op::min: return std::min(a, b);
      case op::max: return std::max(a, b);
      case op::band: return static_cast<T>(a & b);
      case op::bor: return static_cast<T>(a | b);
      default: return static_cast<T>(a ^ b);
    }
  } else {  // std::complex
    return o == op::prod ? a * b : a + b;
  }
}

template <class T, op O>
void fold_with(std::byte* acc, const std::byte* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T a;
    T b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, in + i * sizeof(T), sizeof(T));
    a = combine(a, b, O);
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

/// The op chosen once per call, not per element.
template <class T>
void combine_all(std::byte* acc, const std::byte* in, std::size_t bytes_count, op o) {
  const std::size_t n = bytes_count / sizeof(T);
  switch (o) {
    case op::prod: return fold_with<T, op::prod>(acc, in, n);
    case op::min: return fold_with<T, op::min>(acc, in, n);
    case op::max: return fold_with<T, op::max>(acc, in, n);
    case op::band: return fold_with<T, op::band>(acc, in, n);
    case op::bor: return fold_with<T, op::bor>(acc, in, n);
    case op::bxor: return fold_with<T, op::bxor>(acc, in, n);
    default: return fold_with<T, op::sum>(acc, in, n);  // sum, avg
  }
}

void combine_bools(std::byte* acc, const std::byte* in, std::size_t n, op o) {
  for (std::size_t i = 0; i < n; ++i) {
    const bool a = acc[i] != std::byte{0};
    const bool b = in[i] != std::byte{0};
    const bool r = (o == op::prod || o == op::min || o == op::band) ? (a && b) : o == op::bxor ? (a != b) : (a || b);
    acc[i] = std::byte{r};
  }
}

}  // namespace

/// acc = acc op in, element by element, both in the reduction type of e.
void combine_into(std::span<std::byte> acc, std::span<const std::byte> in, elem e, op o) {
  switch (wide(e)) {
    case elem::f32: return combine_all<float>(acc.data(), in.data(), acc.size(), o);
    case elem::f64: return combine_all<double>(acc.data(), in.data(), acc.size(), o);
    case elem::c64: return combine_all<std::complex<float>>(acc.data(), in.data(), acc.size(), o);
    case elem::c128: return combine_all<std::complex<double>>(acc.data(), in.data(), acc.size(), o);
    case elem::i8: return combine_all<std::int8_t>(acc.data(), in.data(), acc.size(), o);
    case elem::u8: return combine_all<std::uint8_t>(acc.data(), in.data(), acc.size(), o);
    case elem::i16: return combine_all<std::int16_t>(acc.data(), in.data(), acc.size(), o);
    case elem::u16: return combine_all<std::uint16_t>(acc.data(), in.data(), acc.size(), o);
    case elem::i32: return combine_all<std::int32_t>(acc.data(), in.data(), acc.size(), o);
    case elem::u32: return combine_all<std::uint32_t>(acc.data(), in.data(), acc.size(), o);
    case elem::i64: return combine_all<std::int64_t>(acc.data(), in.data(), acc.size(), o);
    case elem::u64: return combine_all<std::uint64_t>(acc.data(), in.data(), acc.size(), o);
    default: return combine_bools(acc.data(), in.data(), acc.size(), o);
  }
}

/// Divides every (floating-point or complex) value by n: avg's last step.
void divide(std::span<std::byte> values, elem e, int n) {
  const auto each = [&]<class T>(T*) {
    auto* v = reinterpret_cast<T*>(values.data());
    for (std::size_t i = 0; i < values.size() / sizeof(T); ++i) v[i] /= static_cast<typename T::value_type>(n);
  };
  const auto real = [&]<class T>(T*) {
    auto* v = reinterpret_cast<T*>(values.data());
    for (std::size_t i = 0; i < values.size() / sizeof(T); ++i) v[i] /= static_cast<T>(n);
  };
  switch (wide(e)) {
    case elem::f32: return real(static_cast<float*>(nullptr));
    case elem::f64: return real(static_cast<double*>(nullptr));
    case elem::c64: return each(static_cast<std::complex<float>*>(nullptr));
    default: return each(static_cast<std::complex<double>*>(nullptr));
  }
}

}  // namespace jobkit_python
