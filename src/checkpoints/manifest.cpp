#include "checkpoints/manifest.hpp"

#include <fmt/format.h>

#include <charconv>

#include "core/json.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

constexpr std::string_view part_start = R"(  {"rank":)";

/// Reads the fields of one part line in order; every read checks the text it expects.
class line_reader {
 public:
  line_reader(std::string_view text, std::size_t number) : text_(text), number_(number) {}

  void expect(std::string_view literal) {
    if (!text_.starts_with(literal)) fail(fmt::format("expected '{}'", literal));
    text_.remove_prefix(literal.size());
  }

  template <class Integer>
  Integer integer() {
    Integer value{};
    const auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), value);
    if (ec != std::errc{} || end == text_.data()) fail("expected a number");
    text_.remove_prefix(static_cast<std::size_t>(end - text_.data()));
    return value;
  }

  /// A JSON string as json_string writes it: \" \\ \n \t \r and \u00XX escapes only.
  std::string string() {
    expect("\"");
    std::string out;
    while (!text_.empty() && text_.front() != '"') {
      char c = text_.front();
      text_.remove_prefix(1);
      if (c == '\\') {
        if (text_.empty()) fail("a string ends inside an escape");
        const char kind = text_.front();
        text_.remove_prefix(1);
        switch (kind) {
          case '"': c = '"'; break;
          case '\\': c = '\\'; break;
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'u': {
            unsigned code = 0;
            if (text_.size() < 4 || !text_.starts_with("00")) fail("an escape other than \\u00XX");
            const auto [end, ec] = std::from_chars(text_.data() + 2, text_.data() + 4, code, 16);
            if (ec != std::errc{} || end != text_.data() + 4) fail("a bad \\u escape");
            text_.remove_prefix(4);
            c = static_cast<char>(code);
            break;
          }
          default: fail("an unknown escape");
        }
      }
      out += c;
    }
    expect("\"");
    return out;
  }

  /// Exactly 8 hexadecimal digits.
  std::uint32_t hex32() {
    std::uint32_t value = 0;
    if (text_.size() < 8 || text_.substr(0, 8).find_first_not_of("0123456789abcdef") != std::string_view::npos) {
      fail("expected 8 hexadecimal digits of CRC-32C");
    }
    std::from_chars(text_.data(), text_.data() + 8, value, 16);
    text_.remove_prefix(8);
    return value;
  }

  bool at_end() const noexcept { return text_.empty(); }

  [[noreturn]] void fail(std::string_view what) const {
    throw error(errc::io, fmt::format("manifest line {}: {}", number_, what));
  }

 private:
  std::string_view text_;
  std::size_t number_;
};

}  // namespace

std::string manifest_line(const manifest_part& part) {
  return fmt::format(R"({}{},"host":{},"file":{},"size":{},"crc32c":"{:08x}"}})", part_start, part.rank,
                     json_string(part.host), json_string(part.file), part.size, part.crc32c);
}

std::vector<manifest_part> parse_manifest_parts(std::string_view text) {
  std::vector<manifest_part> parts;
  std::size_t number = 0;
  while (!text.empty()) {
    const auto newline = text.find('\n');
    auto line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++number;
    if (!line.starts_with(part_start)) continue;
    if (line.ends_with(',')) line.remove_suffix(1);
    line_reader in(line, number);
    manifest_part part;
    in.expect(part_start);
    part.rank = in.integer<int>();
    in.expect(R"(,"host":)");
    part.host = in.string();
    in.expect(R"(,"file":)");
    part.file = in.string();
    in.expect(R"(,"size":)");
    part.size = in.integer<std::uint64_t>();
    in.expect(R"(,"crc32c":")");
    part.crc32c = in.hex32();
    in.expect(R"("})");
    if (!in.at_end()) in.fail("unexpected text after the part");
    if (part.rank < 0) in.fail("a negative rank");
    if (part.file.empty() || part.file.front() == '/' || part.file.find("..") != std::string::npos) {
      in.fail(fmt::format("file {} is not inside the step", json_string(part.file)));
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace jobkit::detail
