#pragma once

// What the unit tests share: N threads as N ranks of a group (inprocess_groups.hpp), and text checks.

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "inprocess_groups.hpp"
#include "jobkit/collectives.hpp"

namespace test_support {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// What one rank got: a value (true for a void function), or the exception's text.
template <class T>
struct outcome {
  std::optional<T> value;
  std::string error;  ///< what() of the exception, empty when none was thrown
  std::optional<jobkit::errc> code;
  bool std_exception = false;  ///< a non-jobkit exception reached this rank
};

template <class F>
using result_of = std::conditional_t<std::is_void_v<std::invoke_result_t<F&, jobkit::group&>>, bool,
                                     std::invoke_result_t<F&, jobkit::group&>>;

/// Runs fn(groups[r]) on one thread per group and returns what every rank got.
template <class F, class T = result_of<F>>
std::vector<outcome<T>> on_ranks(std::vector<jobkit::group> groups, F fn) {
  std::vector<outcome<T>> outcomes(groups.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < groups.size(); ++r) {
    threads.emplace_back([&, r] {
      auto& out = outcomes[r];
      try {
        if constexpr (std::is_void_v<std::invoke_result_t<F&, jobkit::group&>>) {
          fn(groups[r]);
          out.value.emplace(true);
        } else {
          out.value.emplace(fn(groups[r]));
        }
      } catch (const jobkit::error& e) {
        out.error = e.what();
        out.code = e.code();
      } catch (const std::exception& e) {
        out.error = e.what();
        out.std_exception = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

/// The same over the groups of `size` ranks in this process (inprocess_groups: one node).
template <class F, class T = result_of<F>>
std::vector<outcome<T>> on_ranks(int size, F fn) {
  return on_ranks(inprocess_groups(size), std::move(fn));
}

/// Each rank's error text, empty where it returned normally.
template <class T>
std::vector<std::string> errors_of(const std::vector<outcome<T>>& outcomes) {
  std::vector<std::string> errors;
  for (const auto& o : outcomes) errors.push_back(o.error);
  return errors;
}

}  // namespace test_support
