// Values to bytes and back: exact, nested, user types, and bad bytes.
#include "jobkit/serialize.hpp"

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "../catch.hpp"
#include "jobkit/error.hpp"

namespace {

struct point {
  double x;
  std::int32_t y;
  bool operator==(const point&) const = default;
};

enum class color : std::uint8_t { red, green };

/// Not trivially copyable, so it needs the customisation point.
struct labelled {
  std::string label;
  std::vector<int> values;
  bool operator==(const labelled&) const = default;
};

/// Trivially copyable, but the user's serializer must win (it writes only x).
struct only_x {
  int x;
  int ignored;
};

struct no_way {
  std::string s;  // no serializer, not trivially copyable
};

template <class T>
T round_trip(const T& value) {
  return jobkit::from_bytes<T>(jobkit::to_bytes(value));
}

}  // namespace

template <>
struct jobkit::serializer<labelled> {
  static void write(jobkit::byte_writer& w, const labelled& v) {
    w.write(v.label);
    w.write(v.values);
  }
  static labelled read(jobkit::byte_reader& r) {
    auto label = r.read<std::string>();
    return {std::move(label), r.read<std::vector<int>>()};
  }
};

template <>
struct jobkit::serializer<only_x> {
  static void write(jobkit::byte_writer& w, const only_x& v) { w.write(v.x); }
  static only_x read(jobkit::byte_reader& r) { return {r.read<int>(), -1}; }
};

// What can be sent is decided at compile time.
static_assert(jobkit::sendable<double>);
static_assert(jobkit::sendable<std::string>);
static_assert(jobkit::sendable<std::vector<std::map<std::string, std::vector<double>>>>);
static_assert(jobkit::sendable<std::tuple<int, std::string, std::optional<float>>>);
static_assert(jobkit::sendable<point>);
static_assert(jobkit::sendable<color>);
static_assert(jobkit::sendable<labelled>);
static_assert(jobkit::sendable<std::vector<labelled>>);
static_assert(!jobkit::sendable<int*>);
static_assert(!jobkit::sendable<const char*>);
static_assert(!jobkit::sendable<std::string_view>);
static_assert(!jobkit::sendable<std::span<int>>);
static_assert(!jobkit::sendable<std::vector<int*>>);
static_assert(!jobkit::sendable<no_way>);
static_assert(!jobkit::sendable<std::vector<no_way>>);
static_assert(!jobkit::sendable<std::map<std::string, no_way>>);
// Elements of no bytes: a corrupt count could not be told from the bytes (a hang, or memory).
static_assert(jobkit::sendable<std::tuple<>>);
static_assert(jobkit::sendable<std::vector<std::pair<std::tuple<>, bool>>>);
static_assert(jobkit::sendable<std::map<std::tuple<>, int>>);
static_assert(!jobkit::sendable<std::vector<std::tuple<>>>);
static_assert(!jobkit::sendable<std::set<std::array<int, 0>>>);
static_assert(!jobkit::sendable<std::map<std::tuple<>, std::array<double, 0>>>);
static_assert(!jobkit::sendable<std::vector<std::array<std::tuple<>, 3>>>);

TEST_CASE("arithmetic values keep every bit", "[serialize]") {
  CHECK(round_trip(1.0 / 3.0) == 1.0 / 3.0);
  CHECK(round_trip(std::numeric_limits<double>::denorm_min()) == std::numeric_limits<double>::denorm_min());
  CHECK(round_trip(std::numeric_limits<std::int64_t>::max()) == std::numeric_limits<std::int64_t>::max());
  CHECK(round_trip(std::numeric_limits<std::uint64_t>::max()) == std::numeric_limits<std::uint64_t>::max());
  CHECK(round_trip(static_cast<long double>(1) / 3) == static_cast<long double>(1) / 3);
  CHECK(round_trip(true) == true);
  CHECK(round_trip(color::green) == color::green);
  CHECK(jobkit::to_bytes(1.0 / 3.0).size() == sizeof(double));
}

TEST_CASE("standard containers round-trip, nested", "[serialize]") {
  CHECK(round_trip(std::string()).empty());
  CHECK(round_trip(std::string("with\0nul", 8)) == std::string("with\0nul", 8));
  const std::vector<std::vector<std::string>> nested{{"a", ""}, {}, {"longer string"}};
  CHECK(round_trip(nested) == nested);
  const std::map<std::string, std::vector<double>> m{{"loss", {0.5, 0.25}}, {"empty", {}}};
  CHECK(round_trip(m) == m);
  const std::set<int> s{3, 1, 2};
  CHECK(round_trip(s) == s);
  const std::unordered_map<int, std::string> u{{1, "one"}, {2, "two"}};
  CHECK(round_trip(u) == u);
  const std::optional<std::string> some("x"), none;
  CHECK(round_trip(some) == some);
  CHECK(round_trip(none) == none);
  const std::tuple<int, std::string, double> t{7, "seven", 7.5};
  CHECK(round_trip(t) == t);
  const std::pair<std::string, int> p{"p", 1};
  CHECK(round_trip(p) == p);
  const std::array<std::string, 2> a{"x", "y"};
  CHECK(round_trip(a) == a);
  const std::vector<bool> bits{true, false, true};
  CHECK(round_trip(bits) == bits);
  const std::vector<point> points{{1.5, 2}, {-0.0, -3}};
  CHECK(round_trip(points) == points);
}

TEST_CASE("a serializer specialisation is used, and wins over raw bytes", "[serialize]") {
  const std::vector<labelled> values{{"a", {1, 2}}, {"", {}}};
  CHECK(round_trip(values) == values);
  CHECK(jobkit::to_bytes(only_x{5, 6}).size() == sizeof(int));
  CHECK(round_trip(only_x{5, 6}).ignored == -1);
}

TEST_CASE("bytes that do not match the type are an error, not a value", "[serialize]") {
  const auto bytes = jobkit::to_bytes(std::string("hello"));
  try {
    jobkit::from_bytes<std::string>(std::span(bytes).first(bytes.size() - 1));
    FAIL("a truncated string was accepted");
  } catch (const jobkit::error& e) {
    CHECK(std::string(e.what()).find("same type") != std::string::npos);
  }
  CHECK_THROWS_AS(jobkit::from_bytes<int>(bytes), jobkit::error);  // bytes left over
  CHECK_THROWS_AS(jobkit::from_bytes<std::int64_t>(jobkit::to_bytes(std::int32_t{1})), jobkit::error);
  // A corrupt element count must not allocate the announced size.
  const auto huge = jobkit::to_bytes(std::numeric_limits<std::uint64_t>::max());
  CHECK_THROWS_AS(jobkit::from_bytes<std::vector<double>>(huge), jobkit::error);
  CHECK_THROWS_AS(jobkit::from_bytes<std::vector<std::string>>(huge), jobkit::error);
  // A byte other than 0 or 1 is no bool (found by tests/fuzz: reading one was undefined behaviour).
  const auto two = jobkit::to_bytes(std::uint8_t{2});
  CHECK_THROWS_AS(jobkit::from_bytes<bool>(two), jobkit::error);
  CHECK_THROWS_AS(jobkit::from_bytes<std::vector<bool>>(jobkit::to_bytes(std::vector<std::uint8_t>{1, 2})),
                  jobkit::error);
  const std::vector<std::byte> engaged_true{std::byte{1}, std::byte{1}}, engaged_two{std::byte{1}, std::byte{2}};
  CHECK(jobkit::from_bytes<std::optional<bool>>(engaged_true) == std::optional<bool>(true));
  CHECK_THROWS_AS(jobkit::from_bytes<std::optional<bool>>(engaged_two), jobkit::error);
}
