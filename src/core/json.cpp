#include "core/json.hpp"

#include <fmt/format.h>

namespace jobkit::detail {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20) {
          out += fmt::format("\\u{:04x}", ch);
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

}  // namespace jobkit::detail
