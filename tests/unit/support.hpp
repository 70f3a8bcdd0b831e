#pragma once

// What the unit tests share: N threads as N ranks of a group, and text checks.

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "jobkit/collectives.hpp"
#include "transport/inprocess.hpp"

namespace test_support {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Groups of `size` ranks inside one process (the in-process transport), one per thread.
inline std::vector<jobkit::group> inprocess_groups(int size, const std::string& hostname = "localhost") {
  std::vector<jobkit::group> groups;
  for (auto& state : jobkit::detail::make_inprocess_group_states(size, hostname))
    groups.push_back(jobkit::detail::group_over(std::move(state)));
  return groups;
}

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

/// The same over an in-process group of `size` ranks (one process, no sockets).
template <class F, class T = result_of<F>>
std::vector<outcome<T>> on_ranks(int size, F fn, const std::string& hostname = "localhost") {
  return on_ranks(inprocess_groups(size, hostname), std::move(fn));
}

/// Each rank's error text, empty where it returned normally.
template <class T>
std::vector<std::string> errors_of(const std::vector<outcome<T>>& outcomes) {
  std::vector<std::string> errors;
  for (const auto& o : outcomes) errors.push_back(o.error);
  return errors;
}

}  // namespace test_support
