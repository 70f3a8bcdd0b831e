#pragma once

// What the extension's files (_jobkit.cpp, _tensor.cpp) share: the conversion of the Python
// arguments they have in common, and the registration of _tensor.cpp's part of the module.

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace jobkit_python {

/// A call's `timeout` as jobkit._timeout passes it: milliseconds, already checked there by the
/// timeout rule (core/timeout.hpp) and taken as they are; None: the call's default.
using opt_ms = std::optional<std::int64_t>;

/// A call's `timeout` (opt_ms) as the C++ library takes it: 0 for the call's default.
std::chrono::milliseconds timeout_of(opt_ms timeout);

/// A span of time in seconds, the argument `name` (a margin, an age; 0: none), as milliseconds
/// rounded up, by duration_from_seconds's rule (core/timeout.hpp).
/// @throws jobkit::error (invalid_argument) "NAME=VALUE: " and the rule for a value it refuses
std::chrono::milliseconds duration_of(double seconds, std::string_view name);

/// The bytes of a Python bytes object.
std::string bytes_of(const pybind11::handle& object);

/// Adds groups, the in-place array collectives and the object collectives to the module
/// (_tensor.cpp).
void bind_tensor(pybind11::module_& m);

}  // namespace jobkit_python
