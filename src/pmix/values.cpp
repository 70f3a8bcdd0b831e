#include "pmix/values.hpp"

#include <fmt/format.h>

#include <climits>
#include <cstring>
#include <limits>

#include "jobkit/error.hpp"
#include "pmix/library.hpp"

namespace jobkit::detail {
namespace {

[[noreturn]] void refuse(std::string_view key, const std::string& why) {
  throw error(errc::pmix, fmt::format("PMIx key {} {}", key, why));
}

std::string type_name(const pmix_value_t& value) { return pmix_api().PMIx_Data_type_string(value.type); }

std::optional<long long> from_unsigned(unsigned long long value) {
  if (value > static_cast<unsigned long long>(std::numeric_limits<long long>::max())) return std::nullopt;
  return static_cast<long long>(value);
}

/// Whether the type is one of PMIx's integer types (the value may still not fit a long long).
bool integer_type(pmix_data_type_t type) {
  switch (type) {
    case PMIX_UINT8:
    case PMIX_UINT16:
    case PMIX_UINT32:
    case PMIX_UINT64:
    case PMIX_INT8:
    case PMIX_INT16:
    case PMIX_INT32:
    case PMIX_INT64:
    case PMIX_INT:
    case PMIX_UINT:
    case PMIX_SIZE:
    case PMIX_PID:
    case PMIX_PROC_RANK: return true;
    default: return false;
  }
}

}  // namespace

std::optional<long long> pmix_integer(const pmix_value_t& v) {
  switch (v.type) {
    case PMIX_UINT8: return v.data.uint8;
    case PMIX_UINT16: return v.data.uint16;
    case PMIX_UINT32: return v.data.uint32;
    case PMIX_UINT64: return from_unsigned(v.data.uint64);
    case PMIX_INT8: return v.data.int8;
    case PMIX_INT16: return v.data.int16;
    case PMIX_INT32: return v.data.int32;
    case PMIX_INT64: return v.data.int64;
    case PMIX_INT: return v.data.integer;
    case PMIX_UINT: return v.data.uint;
    case PMIX_SIZE: return from_unsigned(v.data.size);
    case PMIX_PID: return v.data.pid;
    case PMIX_PROC_RANK: return v.data.rank;
    default: return std::nullopt;
  }
}

int pmix_count(const pmix_value_t& value, std::string_view key) {
  if (!integer_type(value.type)) refuse(key, fmt::format("has the type {}, not an integer", type_name(value)));
  const auto n = pmix_integer(value);
  if (!n || *n > INT_MAX) {
    refuse(key, fmt::format("holds a {} too large for a count (above {})", type_name(value), INT_MAX));
  }
  if (*n < 0) refuse(key, fmt::format("holds the negative {} {}", type_name(value), *n));
  return static_cast<int>(*n);
}

std::string pmix_text(const pmix_value_t& value, std::string_view key) {
  if (value.type == PMIX_STRING) return value.data.string == nullptr ? std::string() : std::string(value.data.string);
  if (value.type != PMIX_BYTE_OBJECT) {
    refuse(key, fmt::format("has the type {}, not a string or byte object", type_name(value)));
  }
  std::string_view bytes(value.data.bo.bytes == nullptr ? "" : value.data.bo.bytes,
                         value.data.bo.bytes == nullptr ? 0 : value.data.bo.size);
  if (!bytes.empty() && bytes.back() == '\0') bytes.remove_suffix(1);
  if (bytes.find('\0') != std::string_view::npos) {
    refuse(key, fmt::format("is a byte object of {} bytes with a NUL inside, not text", value.data.bo.size));
  }
  return std::string(bytes);
}

std::vector<std::byte> pmix_bytes(const pmix_value_t& value, std::string_view key) {
  const char* begin = nullptr;
  std::size_t size = 0;
  if (value.type == PMIX_BYTE_OBJECT) {
    begin = value.data.bo.bytes;
    size = begin == nullptr ? 0 : value.data.bo.size;
  } else if (value.type == PMIX_STRING) {
    begin = value.data.string;
    size = begin == nullptr ? 0 : std::strlen(begin);
  } else {
    refuse(key, fmt::format("has the type {}, not a byte object or string", type_name(value)));
  }
  const auto* first = reinterpret_cast<const std::byte*>(begin);
  return {first, first + size};
}

}  // namespace jobkit::detail
