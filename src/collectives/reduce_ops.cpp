#include "jobkit/detail/reduce_ops.hpp"

#include <fmt/format.h>

#include <array>
#include <string>

#include "jobkit/collectives.hpp"
#include "jobkit/error.hpp"

namespace jobkit {

namespace {

constexpr std::array<std::pair<reduce_op, std::string_view>, 8> names{{{reduce_op::sum, "sum"},
                                                                       {reduce_op::prod, "prod"},
                                                                       {reduce_op::min, "min"},
                                                                       {reduce_op::max, "max"},
                                                                       {reduce_op::band, "band"},
                                                                       {reduce_op::bor, "bor"},
                                                                       {reduce_op::bxor, "bxor"},
                                                                       {reduce_op::avg, "avg"}}};

}  // namespace

std::string_view to_string(reduce_op op) noexcept {
  for (const auto& [o, name] : names) {
    if (o == op) return name;
  }
  return "unknown";
}

reduce_op reduce_op_of(std::string_view name) {
  for (const auto& [o, known] : names) {
    if (known == name) return o;
  }
  throw error(errc::invalid_argument,
              fmt::format("op='{}' is not one of sum, prod, min, max, band, bor, bxor, avg", name));
}

namespace detail {

std::string_view reduce_op_refusal(reduce_op op, reduced_as as) noexcept {
  const bool bitwise = op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor;
  if (bitwise && as != reduced_as::integral) return "bitwise ops take integral (and bool) elements only";
  if (op == reduce_op::avg && as == reduced_as::integral) return "avg takes floating-point and complex elements only";
  if (as == reduced_as::complex && (op == reduce_op::min || op == reduce_op::max))
    return "complex numbers have no order";
  return {};
}

void check_reduce_op(std::string_view collective, reduce_op op, reduced_as as, std::string_view elements) {
  const auto why = reduce_op_refusal(op, as);
  if (why.empty()) return;
  throw error(errc::invalid_argument, fmt::format("{}: op={} on {}: {}", collective, to_string(op), elements, why));
}

}  // namespace detail
}  // namespace jobkit
