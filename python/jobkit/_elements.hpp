#pragma once

// The element types (torch's CPU dtypes) and reductions of the Python module's array collectives
// (_tensor.cpp): parsing their names, the ops each dtype admits, and element-wise folding over raw
// bytes. float16 and bfloat16 are reduced in float32 (widen, then narrow once).

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "jobkit/collectives.hpp"

namespace jobkit_python {

/// Throws jobkit::error (invalid_argument) with `message`.
[[noreturn]] void invalid(const std::string& message);

enum class elem { f16, bf16, f32, f64, c64, c128, i8, u8, i16, u16, i32, u32, i64, u64, b8 };

struct elem_info {
  elem type;
  const char* name;  ///< torch's and numpy's name: "bfloat16"
  std::size_t size;
};

const elem_info& info(elem e);
/// The element type named `name`. @throws jobkit::error (invalid_argument) for another name
elem elem_of(const std::string& name);

/// The reductions are the C++ library's, their names and rule too (jobkit::reduce_op_of,
/// jobkit/detail/reduce_ops.hpp).
using op = jobkit::reduce_op;

/// Refuses an op that the dtype has no meaning for, before any communication (the library's rule).
void check_op(elem e, op o, const char* collective);

/// The type a reduction works in: float32 for the 16-bit floats, the element itself otherwise.
elem wide(elem e);
/// The array's elements in its reduction type (a copy of the bytes, or widened to float32).
std::vector<std::byte> widen(std::span<const std::byte> data, elem e);
/// Writes reduced values back in the array's own type (rounding a float32 to 16 bits once).
void narrow(std::span<const std::byte> values, elem e, std::byte* to);
/// acc = acc op in, element by element, both in the reduction type of e.
void combine_into(std::span<std::byte> acc, std::span<const std::byte> in, elem e, op o);
/// Divides every (floating-point or complex) value by n: avg's last step.
void divide(std::span<std::byte> values, elem e, int n);

}  // namespace jobkit_python
