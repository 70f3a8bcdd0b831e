#pragma once

// The one rule of which reduction applies to which elements, for the C++ collectives and the
// Python module's arrays and numbers alike; not part of jobkit's API.

#include <string_view>

#include "jobkit/export.hpp"

namespace jobkit {
enum class reduce_op;
}

namespace jobkit::detail {

/// What an element is reduced as: an integer (bool included), a floating-point or a complex number.
enum class reduced_as { integral, floating, complex };

/// Why `op` does not apply to elements reduced `as` ("bitwise ops take integral types only"), or
/// empty when it does: bitwise ops apply to integers only, avg to floating-point and complex
/// numbers only, min and max to no complex numbers. Not exported: the Python module links the
/// library's objects.
std::string_view reduce_op_refusal(reduce_op op, reduced_as as) noexcept;

/// Throws jobkit::error (invalid_argument) "COLLECTIVE: op=OP on ELEMENTS: WHY" when `op` does
/// not apply; `elements` says what the caller passed ("dtype float32", "a floating-point type").
JOBKIT_API void check_reduce_op(std::string_view collective, reduce_op op, reduced_as as, std::string_view elements);

/// The same for the C++ element types, which are integral or floating-point (CUDA's half types
/// too): "an integral type" or "a floating-point type".
inline void check_reduce_op(std::string_view collective, reduce_op op, bool integral) {
  check_reduce_op(collective, op, integral ? reduced_as::integral : reduced_as::floating,
                  integral ? "an integral type" : "a floating-point type");
}

}  // namespace jobkit::detail
