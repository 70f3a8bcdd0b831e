// Groups, the in-place array collectives and the object collectives over a group, in the
// extension (python/jobkit/_collectives.py wraps them). An array arrives as (address, bytes, dtype,
// shape) from the package, which takes it from a CPU tensor's data_ptr(), a numpy array's
// __array_interface__ or the buffer protocol; the bytes move without Python objects and without
// the GIL. Its dtype and shape travel in the signature the members compare
// (jobkit::call_options::signature), so a mismatch fails on every member. Element types and
// reductions: _elements.hpp.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "_elements.hpp"
#include "_module.hpp"
#include "core/embedder.hpp"
#include "jobkit/collectives.hpp"
#include "jobkit/helpers.hpp"

namespace py = pybind11;

namespace {

using namespace jobkit_python;
using bytes = std::vector<std::byte>;

// ---- Arrays from the package ----

/// A caller's array: (address, bytes, dtype, shape) as the package describes it.
struct array {
  std::byte* data;
  std::size_t size;
  elem type;
  std::string shape;  ///< "4, 8"

  std::span<std::byte> span() const { return {data, size}; }
  std::string signature() const { return std::string(info(type).name) + "[" + shape + "]"; }
};

array array_of(const py::tuple& t) {
  array a{reinterpret_cast<std::byte*>(t[0].cast<std::uintptr_t>()), t[1].cast<std::size_t>(),
          elem_of(t[2].cast<std::string>()), t[3].cast<std::string>()};
  if (a.size % info(a.type).size != 0)
    invalid("an array of " + std::to_string(a.size) + " bytes of " + info(a.type).name);
  return a;
}

std::vector<array> arrays_of(const py::list& items) {
  std::vector<array> out;
  for (const auto& item : items) out.push_back(array_of(item.cast<py::tuple>()));
  return out;
}

/// Checks that every array of `parts` has `like`'s dtype and `bytes` bytes (a local mistake).
void check_parts(const char* collective, const char* what, const std::vector<array>& parts, const array& like,
                 std::size_t count, std::optional<std::size_t> bytes_each) {
  if (parts.size() != count) {
    invalid(std::string(collective) + ": " + what + " holds " + std::to_string(parts.size()) +
            " arrays for a group of " + std::to_string(count) + " ranks");
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].type != like.type || (bytes_each && parts[i].size != *bytes_each)) {
      invalid(std::string(collective) + ": " + what + "[" + std::to_string(i) + "] is " + parts[i].signature() +
              " where " + like.signature() + " is due");
    }
  }
}

// ---- Calls ----

jobkit::group& group_of(const py::object& g) { return g.is_none() ? jobkit::world() : g.cast<jobkit::group&>(); }

/// A Python exception raised by a callable that a collective runs: the other members get its
/// short text ("ValueError: boom"), this rank the exception itself.
class callable_error : public std::runtime_error {
 public:
  explicit callable_error(const py::error_already_set& e)
      : std::runtime_error(std::string(py::str(e.type().attr("__name__"))) + ": " + std::string(py::str(e.value()))),
        error(e) {}
  py::error_already_set error;
};

/// fn(*args)'s bytes, called (the GIL held) from a callable a collective runs without it.
template <class... A>
std::string call_for_bytes(const py::function& fn, A&&... args) {
  try {
    return std::string(py::reinterpret_borrow<py::bytes>(fn(std::forward<A>(args)...)));
  } catch (const py::error_already_set& e) {
    throw callable_error(e);
  }
}

/// Runs fn without the GIL, with the Python caller as the call site of jobkit's messages (the
/// package started the runtime). A Python exception from a signal handler abandons the wait and
/// fails the group for the other members, as in _jobkit.cpp.
template <class F>
auto blocking(const py::module_& m, jobkit::group& g, F&& fn) {
  jobkit::detail::call_site_override site(m.attr("call_site")().cast<std::string>());
  const auto& where = *jobkit::detail::current_call_site_override();
  py::gil_scoped_release nogil;
  try {
    return fn();
  } catch (const jobkit::error& e) {
    std::string message = e.what();
    const auto self = jobkit::detail::describe_self();
    if (message.find(self) == std::string::npos) message += " (on " + self + ", at " + where + ")";
    throw jobkit::error(e.code(), message, e.native_status());
  } catch (const callable_error& e) {
    throw e.error;
  } catch (const py::error_already_set&) {
    g.abort("a signal interrupted " + jobkit::detail::describe_self() + " in a jobkit call at " + where);
    throw;
  }
}

/// The reduction of every member's `values` (in the reduction type of e), in place, folded in
/// rank order on the way to group rank 0; avg divided at the end. Runs without the GIL.
void reduce(jobkit::group& g, std::span<std::byte> values, elem e, op o, const jobkit::call_options& options) {
  g.reduce_into(
      values, [&](std::span<std::byte> acc, std::span<const std::byte> in) { combine_into(acc, in, e, o); }, options);
  if (o == op::avg) divide(values, e, g.size());
}

void all_reduce(const py::module_& m, const py::tuple& target, const std::string& op_name, const py::object& gr,
                opt_ms timeout) {
  const auto a = array_of(target);
  const auto o = jobkit::reduce_op_of(op_name);
  check_op(a.type, o, "all_reduce");
  auto& g = group_of(gr);
  const jobkit::call_options options{timeout_of(timeout), a.signature() + ", op " + op_name};
  blocking(m, g, [&] {
    if (wide(a.type) == a.type) return reduce(g, a.span(), a.type, o, options);  // in the caller's memory
    auto values = widen(a.span(), a.type);
    reduce(g, values, a.type, o, options);
    narrow(values, a.type, a.data);
  });
}

/// reduce_scatter: the reduction of every member's parts (concatenated), this member's part into
/// out. `inputs` holds size() arrays like out, or one of size() times out's elements.
void reduce_scatter(const py::module_& m, const py::tuple& target, const py::list& inputs, const std::string& op_name,
                    const py::object& gr, opt_ms timeout) {
  const auto out = array_of(target);
  const auto parts = arrays_of(inputs);
  const auto o = jobkit::reduce_op_of(op_name);
  check_op(out.type, o, "reduce_scatter");
  auto& g = group_of(gr);
  const auto members = static_cast<std::size_t>(g.size());
  const bool flat = parts.size() == 1 && parts[0].type == out.type && parts[0].size == out.size * members;
  if (!flat) check_parts("reduce_scatter", "input_list", parts, out, members, out.size);
  const jobkit::call_options options{timeout_of(timeout),
                                     out.signature() + " from " + std::to_string(members) + " parts, op " + op_name};
  blocking(m, g, [&] {
    bytes mine;
    for (const auto& p : parts) {
      const auto w = widen(p.span(), p.type);
      mine.insert(mine.end(), w.begin(), w.end());
    }
    reduce(g, mine, out.type, o, options);
    const std::size_t piece = mine.size() / members;
    narrow(std::span<const std::byte>(mine).subspan(piece * static_cast<std::size_t>(g.rank()), piece), out.type,
           out.data);
  });
}

void define_arrays(py::module_& m) {
  m.def("array_all_reduce",
        [m](const py::tuple& a, const std::string& o, const py::object& g, opt_ms t) { all_reduce(m, a, o, g, t); });
  m.def("array_reduce_scatter", [m](const py::tuple& out, const py::list& in, const std::string& o, const py::object& g,
                                    opt_ms t) { reduce_scatter(m, out, in, o, g, t); });
  m.def("array_broadcast", [m](const py::tuple& target, int src, const py::object& gr, opt_ms timeout) {
    const auto a = array_of(target);
    auto& g = group_of(gr);
    blocking(m, g, [&] {
      g.broadcast_into(a.span(), jobkit::rooted_options{src, timeout_of(timeout), a.signature()});
    });
  });
  m.def("array_all_gather_flat",
        [m](const py::tuple& output, const py::tuple& input, const py::object& gr, opt_ms timeout) {
          const auto out = array_of(output);
          const auto in = array_of(input);
          auto& g = group_of(gr);
          if (out.type != in.type || out.size != in.size * static_cast<std::size_t>(g.size())) {
            invalid("all_gather_into_tensor: output is " + out.signature() + ", not " + std::to_string(g.size()) +
                    " times input " + in.signature());
          }
          blocking(m, g, [&] { g.all_gather_into(in.span(), out.span(), {timeout_of(timeout), in.signature()}); });
        });
  m.def("array_all_gather", [m](const py::list& outputs, const py::tuple& input, const py::object& gr, opt_ms timeout) {
    const auto in = array_of(input);
    const auto outs = arrays_of(outputs);
    auto& g = group_of(gr);
    check_parts("all_gather", "tensor_list", outs, in, static_cast<std::size_t>(g.size()), std::nullopt);
    const bool even = std::all_of(outs.begin(), outs.end(), [&](const array& o) { return o.size == in.size; });
    blocking(m, g, [&] {
      if (even) {  // the bulk path into one buffer
        bytes all(in.size * outs.size());
        g.all_gather_into(in.span(), std::span<std::byte>(all), {timeout_of(timeout), in.signature()});
        for (std::size_t r = 0; r < outs.size(); ++r) std::memcpy(outs[r].data, all.data() + r * in.size, in.size);
        return;
      }
      const bytes mine(in.span().begin(), in.span().end());
      const auto parts =
          g.all_gather(mine, {timeout_of(timeout), std::string(info(in.type).name) + "[sizes per rank]"});
      for (std::size_t r = 0; r < outs.size(); ++r) {
        if (parts[r].size() != outs[r].size) {
          invalid("all_gather: group rank " + std::to_string(r) + " sent " + std::to_string(parts[r].size()) +
                  " bytes but tensor_list[" + std::to_string(r) + "] is " + outs[r].signature() + " on group rank " +
                  std::to_string(g.rank()));
        }
      }
      for (std::size_t r = 0; r < outs.size(); ++r) std::memcpy(outs[r].data, parts[r].data(), parts[r].size());
    });
  });
  m.def("array_gather",
        [m](const py::tuple& input, const py::object& outputs, int dst, const py::object& gr, opt_ms timeout) {
          const auto in = array_of(input);
          auto& g = group_of(gr);
          std::vector<array> outs;
          if (g.rank() == dst) {
            outs = arrays_of(outputs.cast<py::list>());
            check_parts("gather", "gather_list", outs, in, static_cast<std::size_t>(g.size()), in.size);
          }
          blocking(m, g, [&] {
            const bytes mine(in.span().begin(), in.span().end());
            const auto parts = g.gather(mine, jobkit::rooted_options{dst, timeout_of(timeout), in.signature()});
            for (std::size_t r = 0; r < outs.size(); ++r) std::memcpy(outs[r].data, parts.at(r).data(), in.size);
          });
        });
  m.def("array_scatter",
        [m](const py::tuple& output, const py::object& inputs, int src, const py::object& gr, opt_ms timeout) {
          const auto out = array_of(output);
          auto& g = group_of(gr);
          std::vector<array> ins;
          if (g.rank() == src) {
            ins = arrays_of(inputs.cast<py::list>());
            check_parts("scatter", "scatter_list", ins, out, static_cast<std::size_t>(g.size()), out.size);
          }
          blocking(m, g, [&] {
            std::vector<bytes> parts;
            for (const auto& in : ins) parts.emplace_back(in.span().begin(), in.span().end());
            const auto mine = g.scatter(parts, jobkit::rooted_options{src, timeout_of(timeout), out.signature()});
            std::memcpy(out.data, mine.data(), std::min(mine.size(), out.size));
          });
        });
  m.def("buffer_view", [](const py::buffer& b, bool writable) {
    const auto view = b.request(writable);
    if (!PyBuffer_IsContiguous(view.view(), 'C')) invalid("the buffer is not C-contiguous");
    std::string shape;
    for (const auto d : view.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return py::make_tuple(reinterpret_cast<std::uintptr_t>(view.ptr), view.size * view.itemsize, view.format,
                          view.itemsize, shape);
  });
}

// ---- Objects (pickled by the package) and numbers over a group ----

py::list to_list(const std::vector<std::string>& items) {
  py::list out;
  for (const auto& item : items) out.append(py::bytes(item));
  return out;
}

template <class T>
std::vector<T> reduce_numbers(const py::module_& m, const std::vector<T>& values, const std::string& op_name,
                              const py::object& gr, opt_ms timeout) {
  const auto o = jobkit::reduce_op_of(op_name);  // the library refuses what the values cannot take
  auto& g = group_of(gr);
  return blocking(m, g, [&] { return g.all_reduce(values, o, {timeout_of(timeout)}); });
}

void define_callables(py::module_& m) {
  m.def("group_compute_and_broadcast_bytes",
        [m](const py::function& fn, int root, const py::object& gr, opt_ms timeout) {
          auto& g = group_of(gr);
          return py::bytes(blocking(m, g, [&] {
            return g.compute_and_broadcast(
                [&] {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(fn);
                },
                {root, timeout_of(timeout)});
          }));
        });
  m.def("group_gather_from_all_ranks_bytes",
        [m](const py::function& fn, int root, const py::object& gr, opt_ms timeout) {
          auto& g = group_of(gr);
          return to_list(blocking(m, g, [&] {
            return g.gather_from_all_ranks(
                [&] {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(fn);
                },
                {root, timeout_of(timeout)});
          }));
        });
  m.def("group_reduce_and_broadcast_bytes",
        [m](const py::function& map, const py::function& reduce, const py::object& gr, opt_ms timeout) {
          auto& g = group_of(gr);
          return py::bytes(blocking(m, g, [&] {
            return g.reduce_and_broadcast(
                [&] {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(map);
                },
                [&](const std::vector<std::string>& parts) {
                  py::gil_scoped_acquire gil;
                  return call_for_bytes(reduce, to_list(parts));
                },
                {timeout_of(timeout)});
          }));
        });
}

void define_objects(py::module_& m) {
  m.def("group_barrier", [m](const py::object& gr, opt_ms timeout) {
    auto& g = group_of(gr);
    blocking(m, g, [&] { g.barrier({timeout_of(timeout)}); });
  });
  m.def("group_broadcast_bytes", [m](const py::object& data, int root, const py::object& gr, opt_ms timeout) {
    const std::string mine = data.is_none() ? std::string() : bytes_of(data);
    auto& g = group_of(gr);
    return py::bytes(blocking(m, g, [&] { return g.broadcast(mine, root, {timeout_of(timeout)}); }));
  });
  m.def("group_all_gather_bytes", [m](const py::bytes& data, const py::object& gr, opt_ms timeout) {
    const auto mine = std::string(data);
    auto& g = group_of(gr);
    return to_list(blocking(m, g, [&] { return g.all_gather(mine, {timeout_of(timeout)}); }));
  });
  m.def("group_gather_bytes", [m](const py::bytes& data, int root, const py::object& gr, opt_ms timeout) {
    const auto mine = std::string(data);
    auto& g = group_of(gr);
    return to_list(blocking(m, g, [&] { return g.gather(mine, root, {timeout_of(timeout)}); }));
  });
  m.def("group_scatter_bytes", [m](const py::object& items, int root, const py::object& gr, opt_ms timeout) {
    std::vector<std::string> values;
    if (!items.is_none()) {
      for (const auto& item : items.cast<py::sequence>()) values.push_back(bytes_of(item));
    }
    auto& g = group_of(gr);
    return py::bytes(blocking(m, g, [&] { return g.scatter(values, root, {timeout_of(timeout)}); }));
  });
  m.def("group_all_reduce_int", [m](const std::vector<std::int64_t>& values, const std::string& o, const py::object& g,
                                    opt_ms t) { return reduce_numbers(m, values, o, g, t); });
  m.def("group_all_reduce_float", [m](const std::vector<double>& values, const std::string& o, const py::object& g,
                                      opt_ms t) { return reduce_numbers(m, values, o, g, t); });
}

// ---- Groups ----

void define_groups(py::module_& m) {
  py::class_<jobkit::group>(m, "Group")
      .def("rank", &jobkit::group::rank)
      .def("size", &jobkit::group::size)
      .def_property_readonly("world_ranks", &jobkit::group::world_ranks)
      .def("split", [m](jobkit::group& g, int color, int key, opt_ms timeout) {
        return blocking(m, g, [&] { return g.split(color, key, {timeout_of(timeout)}); });
      });
  m.def("make_group", [m](const std::vector<int>& ranks, opt_ms timeout) {
    return blocking(m, jobkit::world(), [&] { return jobkit::make_group(ranks, {timeout_of(timeout)}); });
  });
  m.def("node_group", [m] { return blocking(m, jobkit::world(), [&] { return jobkit::node_group(); }); });
  m.def("component_group", [m] { return blocking(m, jobkit::world(), [&] { return jobkit::component_group(); }); });
  m.def("node_leaders_group",
        [m] { return blocking(m, jobkit::world(), [&] { return jobkit::node_leaders_group(); }); });
  m.def("world_group", [] { return jobkit::world(); });
}

}  // namespace

void jobkit_python::bind_tensor(py::module_& m) {
  define_arrays(m);
  define_objects(m);
  define_callables(m);
  define_groups(m);
}
