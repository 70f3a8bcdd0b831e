#include "jobkit/serialize.hpp"

#include "jobkit/error.hpp"

#include <fmt/format.h>

#include <cstring>

namespace jobkit {

void byte_reader::read_bytes(void* out, std::size_t size) {
  if (size > remaining()) {
    throw error(errc::internal, fmt::format("received value too short: {} more bytes expected, {} left "
                                            "(do all ranks pass the same type?)",
                                            size, remaining()));
  }
  if (size > 0) std::memcpy(out, bytes_.data() + at_, size);
  at_ += size;
}

void byte_reader::expect(std::uint64_t count, std::size_t element_size) const {
  if (element_size > 0 && count > remaining() / element_size) {
    throw error(errc::internal, fmt::format("received value announces {} elements but only {} bytes are left "
                                            "(do all ranks pass the same type?)",
                                            count, remaining()));
  }
}

namespace detail {

void throw_trailing_bytes(std::size_t remaining) {
  throw error(errc::internal,
              fmt::format("received value has {} bytes left over (do all ranks pass the same type?)", remaining));
}

}  // namespace detail
}  // namespace jobkit
