// Groups and in-place array collectives of the extension (python/jobkit/_collectives.py wraps
// them). An array arrives as (address, bytes, dtype, shape) from the package, which takes it from
// a CPU tensor's data_ptr(), a numpy array's __array_interface__ or the buffer protocol; the bytes
// move without Python objects and without the GIL. Its dtype and shape travel in the signature the
// members compare (jobkit::call_options::signature), so a mismatch fails on every member.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/embedder.hpp"
#include "jobkit/collectives.hpp"
#include "jobkit/helpers.hpp"

namespace py = pybind11;

namespace {

using bytes = std::vector<std::byte>;

[[noreturn]] void invalid(const std::string& message) { throw jobkit::error(jobkit::errc::invalid_argument, message); }

// ---- Element types and reductions ----

enum class elem { f16, bf16, f32, f64, c64, c128, i8, u8, i16, u16, i32, u32, i64, u64, b8 };

struct elem_info {
  elem type;
  const char* name;
  std::size_t size;
};

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

const elem_info& info(elem e) { return elems[static_cast<std::size_t>(e)]; }

elem elem_of(const std::string& name) {
  for (const auto& e : elems) {
    if (name == e.name) return e.type;
  }
  invalid("dtype " + name +
          " is not one jobkit's array collectives take (float16, bfloat16, float32, float64, "
          "complex64, complex128, int8 to int64, uint8 to uint64, bool)");
}

enum class op { sum, prod, min, max, avg, band, bor, bxor };
constexpr std::array<const char*, 8> op_names{"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};

op op_of(const std::string& name) {
  for (std::size_t i = 0; i < op_names.size(); ++i) {
    if (name == op_names[i]) return static_cast<op>(i);
  }
  invalid("op='" + name + "' is not one of sum, prod, min, max, avg, band, bor, bxor");
}

bool bitwise(op o) { return o == op::band || o == op::bor || o == op::bxor; }

/// The type a reduction works in: float32 for the 16-bit floats, the element itself otherwise.
elem wide(elem e) { return e == elem::f16 || e == elem::bf16 ? elem::f32 : e; }

/// Refuses an op that the dtype has no meaning for, before any communication.
void check_op(elem e, op o, const char* collective) {
  const bool floating = e == elem::f16 || e == elem::bf16 || e == elem::f32 || e == elem::f64;
  const bool complex = e == elem::c64 || e == elem::c128;
  const auto refuse = [&](const char* why) {
    invalid(std::string(collective) + ": op=" + op_names[static_cast<std::size_t>(o)] + " on dtype " + info(e).name +
            ": " + why);
  };
  if (bitwise(o) && (floating || complex)) refuse("bitwise ops take integer and bool dtypes only");
  if (o == op::avg && !(floating || complex)) refuse("avg takes floating-point and complex dtypes only");
  if (complex && (o == op::min || o == op::max)) refuse("complex numbers have no order");
}

float from_bf16(std::uint16_t v) { return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16); }

std::uint16_t to_bf16(float f) {
  auto bits = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // stays a NaN
  bits += 0x7fff + ((bits >> 16) & 1);                                        // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}

/// The array's elements in its reduction type (a copy of the bytes, or widened to float32).
bytes widen(std::span<const std::byte> data, elem e) {
  if (wide(e) == e) return {data.begin(), data.end()};
  const std::size_t n = data.size() / 2;
  bytes out(n * sizeof(float));
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

// ---- Arrays from the package ----

/// A caller's array: (address, bytes, dtype, shape) as the package describes it.
struct array {
  std::byte* data;
  std::size_t size;
  elem type;
  std::string shape;  ///< "4, 8"

  std::span<std::byte> span() const { return {data, size}; }
  std::string signature() const { return std::string(info(type).name) + "[" + shape + "]"; }
};

array array_of(const py::tuple& t) {
  array a{reinterpret_cast<std::byte*>(t[0].cast<std::uintptr_t>()), t[1].cast<std::size_t>(),
          elem_of(t[2].cast<std::string>()), t[3].cast<std::string>()};
  if (a.size % info(a.type).size != 0)
    invalid("an array of " + std::to_string(a.size) + " bytes of " + info(a.type).name);
  return a;
}

std::vector<array> arrays_of(const py::list& items) {
  std::vector<array> out;
  for (const auto& item : items) out.push_back(array_of(item.cast<py::tuple>()));
  return out;
}

/// Checks that every array of `parts` has `like`'s dtype and `bytes` bytes (a local mistake).
void check_parts(const char* collective, const char* what, const std::vector<array>& parts, const array& like,
                 std::size_t count, std::optional<std::size_t> bytes_each) {
  if (parts.size() != count) {
    invalid(std::string(collective) + ": " + what + " holds " + std::to_string(parts.size()) +
            " arrays for a group of " + std::to_string(count) + " ranks");
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].type != like.type || (bytes_each && parts[i].size != *bytes_each)) {
      invalid(std::string(collective) + ": " + what + "[" + std::to_string(i) + "] is " + parts[i].signature() +
              " where " + like.signature() + " is due");
    }
  }
}

// ---- Calls ----

jobkit::group& group_of(const py::object& g) { return g.is_none() ? jobkit::world() : g.cast<jobkit::group&>(); }

std::chrono::milliseconds timeout_of(std::optional<double> seconds) {
  if (!seconds) return std::chrono::milliseconds{0};
  if (!std::isfinite(*seconds) || *seconds <= 0) {
    invalid("timeout=" + std::to_string(*seconds) + ": a positive number of seconds, or None");
  }
  return std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(*seconds));
}

using opt_seconds = std::optional<double>;

/// A Python exception raised by a callable that a collective runs: the other members get its
/// short text ("ValueError: boom"), this rank the exception itself.
class callable_error : public std::runtime_error {
 public:
  explicit callable_error(const py::error_already_set& e)
      : std::runtime_error(std::string(py::str(e.type().attr("__name__"))) + ": " + std::string(py::str(e.value()))),
        error(e) {}
  py::error_already_set error;
};

/// fn(*args)'s bytes, called (the GIL held) from a callable a collective runs without it.
template <class... A>
std::string call_for_bytes(const py::function& fn, A&&... args) {
  try {
    return std::string(py::reinterpret_borrow<py::bytes>(fn(std::forward<A>(args)...)));
  } catch (const py::error_already_set& e) {
    throw callable_error(e);
  }
}

/// Runs fn without the GIL, with the Python caller as the call site of jobkit's messages (the
/// package started the runtime). A Python exception from a signal handler abandons the wait and
/// fails the group for the other members, as in _jobkit.cpp.
template <class F>
auto blocking(const py::module_& m, jobkit::group& g, F&& fn) {
  jobkit::detail::call_site_override site(m.attr("call_site")().cast<std::string>());
  const auto& where = *jobkit::detail::current_call_site_override();
  py::gil_scoped_release nogil;
  try {
    return fn();
  } catch (const jobkit::error& e) {
    std::string message = e.what();
    const auto self = jobkit::detail::describe_self();
    if (message.find(self) == std::string::npos) message += " (on " + self + ", at " + where + ")";
    throw jobkit::error(e.code(), message, e.native_status());
  } catch (const callable_error& e) {
    throw e.error;
  } catch (const py::error_already_set&) {
    g.abort("a signal interrupted " + jobkit::detail::describe_self() + " in a jobkit call at " + where);
    throw;
  }
}

/// The reduction of every member's `values` (in the reduction type of e), in place, folded in
/// rank order on the way to group rank 0; avg divided at the end. Runs without the GIL.
void reduce(jobkit::group& g, std::span<std::byte> values, elem e, op o, const jobkit::call_options& options) {
  g.reduce_into(
      values, [&](std::span<std::byte> acc, std::span<const std::byte> in) { combine_into(acc, in, e, o); }, options);
  if (o == op::avg) divide(values, e, g.size());
}

void all_reduce(const py::module_& m, const py::tuple& target, const std::string& op_name, const py::object& gr,
                opt_seconds timeout) {
  const auto a = array_of(target);
  const auto o = op_of(op_name);
  check_op(a.type, o, "all_reduce");
  auto& g = group_of(gr);
  const jobkit::call_options options{timeout_of(timeout), a.signature() + ", op " + op_name};
  blocking(m, g, [&] {
    if (wide(a.type) == a.type) return reduce(g, a.span(), a.type, o, options);  // in the caller's memory
    auto values = widen(a.span(), a.type);
    reduce(g, values, a.type, o, options);
    narrow(values, a.type, a.data);
  });
}

/// reduce_scatter: the reduction of every member's parts (concatenated), this member's part into
/// out. `inputs` holds size() arrays like out, or one of size() times out's elements.
void reduce_scatter(const py::module_& m, const py::tuple& target, const py::list& inputs, const std::string& op_name,
                    const py::object& gr, opt_seconds timeout) {
  const auto out = array_of(target);
  const auto parts = arrays_of(inputs);
  const auto o = op_of(op_name);
  check_op(out.type, o, "reduce_scatter");
  auto& g = group_of(gr);
  const auto members = static_cast<std::size_t>(g.size());
  const bool flat = parts.size() == 1 && parts[0].type == out.type && parts[0].size == out.size * members;
  if (!flat) check_parts("reduce_scatter", "input_list", parts, out, members, out.size);
  const jobkit::call_options options{timeout_of(timeout),
                                     out.signature() + " from " + std::to_string(members) + " parts, op " + op_name};
  blocking(m, g, [&] {
    bytes mine;
    for (const auto& p : parts) {
      const auto w = widen(p.span(), p.type);
      mine.insert(mine.end(), w.begin(), w.end());
    }
    reduce(g, mine, out.type, o, options);
    const std::size_t piece = mine.size() / members;
    narrow(std::span<const std::byte>(mine).subspan(piece * static_cast<std::size_t>(g.rank()), piece), out.type,
           out.data);
  });
}

void define_arrays(py::module_& m) {
  m.def("array_all_reduce", [m](const py::tuple& a, const std::string& o, const py::object& g, opt_seconds t) {
    all_reduce(m, a, o, g, t);
  });
  m.def("array_reduce_scatter", [m](const py::tuple& out, const py::list& in, const std::string& o, const py::object& g,
                                    opt_seconds t) { reduce_scatter(m, out, in, o, g, t); });
  m.def("array_broadcast", [m](const py::tuple& target, int src, const py::object& gr, opt_seconds timeout) {
    const auto a = array_of(target);
    auto& g = group_of(gr);
    blocking(m, g, [&] {
      g.broadcast_into(a.span(), jobkit::rooted_options{src, timeout_of(timeout), a.signature()});
    });
  });
  m.def("array_all_gather_flat",
        [m](const py::tuple& output, const py::tuple& input, const py::object& gr, opt_seconds timeout) {
          const auto out = array_of(output);
          const auto in = array_of(input);
          auto& g = group_of(gr);
          if (out.type != in.type || out.size != in.size * static_cast<std::size_t>(g.size())) {
            invalid("all_gather_into_tensor: output is " + out.signature() + ", not " + std::to_string(g.size()) +
                    " times input " + in.signature());
          }
          blocking(m, g, [&] { g.all_gather_into(in.span(), out.span(), {timeout_of(timeout), in.signature()}); });
        });
  m.def("array_all_gather",
        [m](const py::list& outputs, const py::tuple& input, const py::object& gr, opt_seconds timeout) {
          const auto in = array_of(input);
          const auto outs = arrays_of(outputs);
          auto& g = group_of(gr);
          check_parts("all_gather", "tensor_list", outs, in, static_cast<std::size_t>(g.size()), std::nullopt);
          const bool even = std::all_of(outs.begin(), outs.end(), [&](const array& o) { return o.size == in.size; });
          blocking(m, g, [&] {
            if (even) {  // the bulk path into one buffer
              bytes all(in.size * outs.size());
              g.all_gather_into(in.span(), std::span<std::byte>(all), {timeout_of(timeout), in.signature()});
              for (std::size_t r = 0; r < outs.size(); ++r)
                std::memcpy(outs[r].data, all.data() + r * in.size, in.size);
              return;
            }
            const bytes mine(in.span().begin(), in.span().end());
            const auto parts =
                g.all_gather(mine, {timeout_of(timeout), std::string(info(in.type).name) + "[sizes per rank]"});
            for (std::size_t r = 0; r < outs.size(); ++r) {
              if (parts[r].size() != outs[r].size) {
                invalid("all_gather: group rank " + std::to_string(r) + " sent " + std::to_string(parts[r].size()) +
                        " bytes but tensor_list[" + std::to_string(r) + "] is " + outs[r].signature() +
                        " on group rank " + std::to_string(g.rank()));
              }
            }
            for (std::size_t r = 0; r < outs.size(); ++r) std::memcpy(outs[r].data, parts[r].data(), parts[r].size());
          });
        });
  m.def("array_gather",
        [m](const py::tuple& input, const py::object& outputs, int dst, const py::object& gr, opt_seconds timeout) {
          const auto in = array_of(input);
          auto& g = group_of(gr);
          std::vector<array> outs;
          if (g.rank() == dst) {
            outs = arrays_of(outputs.cast<py::list>());
            check_parts("gather", "gather_list", outs, in, static_cast<std::size_t>(g.size()), in.size);
          }
          blocking(m, g, [&] {
            const bytes mine(in.span().begin(), in.span().end());
            const auto parts = g.gather(mine, jobkit::rooted_options{dst, timeout_of(timeout), in.signature()});
            for (std::size_t r = 0; r < outs.size(); ++r) std::memcpy(outs[r].data, parts.at(r).data(), in.size);
          });
        });
  m.def("array_scatter",
        [m](const py::tuple& output, const py::object& inputs, int src, const py::object& gr, opt_seconds timeout) {
          const auto out = array_of(output);
          auto& g = group_of(gr);
          std::vector<array> ins;
          if (g.rank() == src) {
            ins = arrays_of(inputs.cast<py::list>());
            check_parts("scatter", "scatter_list", ins, out, static_cast<std::size_t>(g.size()), out.size);
          }
          blocking(m, g, [&] {
            std::vector<bytes> parts;
            for (const auto& in : ins) parts.emplace_back(in.span().begin(), in.span().end());
            const auto mine = g.scatter(parts, jobkit::rooted_options{src, timeout_of(timeout), out.signature()});
            std::memcpy(out.data, mine.data(), std::min(mine.size(), out.size));
          });
        });
  m.def("buffer_view", [](const py::buffer& b, bool writable) {
    const auto view = b.request(writable);
    if (!PyBuffer_IsContiguous(view.view(), 'C')) invalid("the buffer is not C-contiguous");
    std::string shape;
    for (const auto d : view.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return py::make_tuple(reinterpret_cast<std::uintptr_t>(view.ptr), view.size * view.itemsize, view.format,
                          view.itemsize, shape);
  });
}

// ---- Objects (pickled by the package) and numbers over a group ----

std::string bytes_of(const py::handle& object) { return std::string(py::reinterpret_borrow<py::bytes>(object)); }

py::list to_list(const std::vector<std::string>& items) {
  py::list out;
  for (const auto& item : items) out.append(py::bytes(item));
  return out;
}

jobkit::reduce_op number_op(const std::string& name) {
  for (const auto o : {jobkit::reduce_op::sum, jobkit::reduce_op::prod, jobkit::reduce_op::min, jobkit::reduce_op::max,
                       jobkit::reduce_op::band, jobkit::reduce_op::bor, jobkit::reduce_op::bxor}) {
    if (jobkit::to_string(o) == name) return o;
  }
  invalid("all_reduce: op='" + name + "' is not one of sum, prod, min, max, band, bor, bxor");
}

template <class T>
std::vector<T> reduce_numbers(const py::module_& m, const std::vector<T>& values, const std::string& op_name,
                              const py::object& gr, opt_seconds timeout) {
  const auto o = number_op(op_name);
  auto& g = group_of(gr);
  return blocking(m, g, [&] { return g.all_reduce(values, o, {timeout_of(timeout)}); });
}

void define_callables(py::module_& m) {
  m.def("group_compute_and_broadcast_bytes",
        [m](const py::function& fn, int root, const py::object& gr, opt_seconds timeout) {
          auto& g = group_of(gr);
          return py::bytes(blocking(m, g, [&] {
            return g.compute_and_broadcast(
                [&] {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(fn);
                },
                {root, timeout_of(timeout)});
          }));
        });
  m.def("group_gather_from_all_ranks_bytes",
        [m](const py::function& fn, int root, const py::object& gr, opt_seconds timeout) {
          auto& g = group_of(gr);
          return to_list(blocking(m, g, [&] {
            return g.gather_from_all_ranks(
                [&] {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(fn);
                },
                {root, timeout_of(timeout)});
          }));
        });
  m.def("group_reduce_and_broadcast_bytes",
        [m](const py::function& map, const py::function& reduce, const py::object& gr, opt_seconds timeout) {
          auto& g = group_of(gr);
          return py::bytes(blocking(m, g, [&] {
            return g.reduce_and_broadcast(
                [&] {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(map);
                },
                [&](const std::vector<std::string>& parts) {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(reduce, to_list(parts));
                },
                {timeout_of(timeout)});
          }));
        });
}

void define_objects(py::module_& m) {
  m.def("group_barrier", [m](const py::object& gr, opt_seconds timeout) {
    auto& g = group_of(gr);
    blocking(m, g, [&] { g.barrier({timeout_of(timeout)}); });
  });
  m.def("group_broadcast_bytes", [m](const py::object& data, int root, const py::object& gr, opt_seconds timeout) {
    const std::string mine = data.is_none() ? std::string() : bytes_of(data);
    auto& g = group_of(gr);
    return py::bytes(blocking(m, g, [&] { return g.broadcast(mine, root, {timeout_of(timeout)}); }));
  });
  m.def("group_all_gather_bytes", [m](const py::bytes& data, const py::object& gr, opt_seconds timeout) {
    const auto mine = std::string(data);
    auto& g = group_of(gr);
    return to_list(blocking(m, g, [&] { return g.all_gather(mine, {timeout_of(timeout)}); }));
  });
  m.def("group_gather_bytes", [m](const py::bytes& data, int root, const py::object& gr, opt_seconds timeout) {
    const auto mine = std::string(data);
    auto& g = group_of(gr);
    return to_list(blocking(m, g, [&] { return g.gather(mine, root, {timeout_of(timeout)}); }));
  });
  m.def("group_scatter_bytes", [m](const py::object& items, int root, const py::object& gr, opt_seconds timeout) {
    std::vector<std::string> values;
    if (!items.is_none()) {
      for (const auto& item : items.cast<py::sequence>()) values.push_back(bytes_of(item));
    }
    auto& g = group_of(gr);
    return py::bytes(blocking(m, g, [&] { return g.scatter(values, root, {timeout_of(timeout)}); }));
  });
  m.def("group_all_reduce_int", [m](const std::vector<std::int64_t>& values, const std::string& o, const py::object& g,
                                    opt_seconds t) { return reduce_numbers(m, values, o, g, t); });
  m.def("group_all_reduce_float", [m](const std::vector<double>& values, const std::string& o, const py::object& g,
                                      opt_seconds t) { return reduce_numbers(m, values, o, g, t); });
}

// ---- Groups ----

void define_groups(py::module_& m) {
  py::class_<jobkit::group>(m, "Group")
      .def("rank", &jobkit::group::rank)
      .def("size", &jobkit::group::size)
      .def_property_readonly("world_ranks", &jobkit::group::world_ranks)
      .def("split", [m](jobkit::group& g, int color, int key, opt_seconds timeout) {
        return blocking(m, g, [&] { return g.split(color, key, {timeout_of(timeout)}); });
      });
  m.def("make_group", [m](const std::vector<int>& ranks, opt_seconds timeout) {
    return blocking(m, jobkit::world(), [&] { return jobkit::make_group(ranks, {timeout_of(timeout)}); });
  });
  m.def("node_group", [m] { return blocking(m, jobkit::world(), [&] { return jobkit::node_group(); }); });
  m.def("node_leaders_group",
        [m] { return blocking(m, jobkit::world(), [&] { return jobkit::node_leaders_group(); }); });
  m.def("world_group", [] { return jobkit::world(); });
}

}  // namespace

void bind_tensor(py::module_& m) {
  define_arrays(m);
  define_objects(m);
  define_callables(m);
  define_groups(m);
}
