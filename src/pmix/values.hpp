#pragma once

#include <pmix.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// The one place where jobkit turns a pmix_value_t into what it needs. PMIx servers differ in the
/// type they hand back for the same key: PMIx 5's shared-memory store has returned
/// PMIX_BYTE_OBJECT for a value put as PMIX_STRING (open-mpi/ompi#12475), a byte object put by
/// jobkit may come back as a string, and integer keys differ in width (PMIX_LOCAL_RANK is UINT16,
/// most others UINT32). So every read accepts a string or a byte object wherever it expects either,
/// and an integer of any width and signedness. Pure functions: no PMIx call, no server needed.

/// The value as an integer, whatever its width and signedness; nullopt when it is not an integer
/// type, or an unsigned value above what a long long holds.
std::optional<long long> pmix_integer(const pmix_value_t& value);

/// The value as a count or index: an integer type, from 0 to INT_MAX.
/// @throws jobkit::error (pmix) naming `key` when the value is not an integer, negative or too large
int pmix_count(const pmix_value_t& value, std::string_view key);

/// The value as text: a PMIX_STRING, or a PMIX_BYTE_OBJECT holding text (one trailing NUL, as a C
/// string put with its terminator, is dropped).
/// @throws jobkit::error (pmix) naming `key` for any other type, or bytes with a NUL inside
std::string pmix_text(const pmix_value_t& value, std::string_view key);

/// The value as bytes: a PMIX_BYTE_OBJECT as it is, or a PMIX_STRING's characters (without its
/// terminator: a byte object that a store turned into a string cannot have kept bytes after a NUL).
/// @throws jobkit::error (pmix) naming `key` for any other type
std::vector<std::byte> pmix_bytes(const pmix_value_t& value, std::string_view key);

}  // namespace jobkit::detail
