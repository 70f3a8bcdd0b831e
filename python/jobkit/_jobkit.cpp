// The extension under the Python package `jobkit`: a thin binding of the C++ library. Objects
// travel as bytes here (the package pickles them); callables are Python functions the helpers
// call with the GIL held, and every wait releases the GIL. See python/jobkit/__init__.py.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "_module.hpp"
#include "core/embedder.hpp"
#include "core/timeout.hpp"
#include "jobkit/checkpoints.hpp"
#include "jobkit/collectives.hpp"
#include "jobkit/config.hpp"
#include "jobkit/helpers.hpp"
#include "jobkit/log.hpp"
#include "jobkit/preemption.hpp"
#include "jobkit/progress.hpp"
#include "jobkit/runtime.hpp"
#include "jobkit/workspace.hpp"
#include "nccl/device_rule.hpp"
#include "progress/tracker.hpp"
#include "where/settings.hpp"
#include "where/watch.hpp"

namespace py = pybind11;

namespace {

using jobkit_python::bytes_of;
using jobkit_python::duration_of;
using jobkit_python::opt_ms;
using jobkit_python::timeout_of;

/// A rule of spans of time in seconds (core/timeout.hpp): its conversion to milliseconds
/// (nullopt: refused) and what a refusal is told after "NAME=VALUE: ".
struct seconds_rule {
  std::string_view name;  // the rule's in the module: NAME_from_seconds, NAME_seconds_rule
  std::optional<std::chrono::milliseconds> (*convert)(double seconds);
  std::string_view text;
};
/// Every timeout's rule (more than 0 seconds), and the rule of a span where 0 means none (a
/// margin, an age).
constexpr seconds_rule timeout_rule{"timeout", &jobkit::detail::timeout_from_seconds,
                                    jobkit::detail::timeout_seconds_rule};
constexpr seconds_rule duration_rule{"duration", &jobkit::detail::duration_from_seconds,
                                     jobkit::detail::duration_seconds_rule};

/// Both rules in the module, for jobkit._timeout: NAME_from_seconds, the milliseconds or None when
/// refused, and NAME_seconds_rule, what a refusal says; and longest_seconds, the longest span either takes.
void define_seconds_rules(py::module_& m) {
  for (const seconds_rule rule : {timeout_rule, duration_rule}) {
    m.def((std::string(rule.name) + "_from_seconds").c_str(), [rule](double seconds) -> std::optional<std::int64_t> {
      const auto span = rule.convert(seconds);
      if (!span) return std::nullopt;
      return span->count();
    });
    m.attr((std::string(rule.name) + "_seconds_rule").c_str()) = std::string(rule.text);
  }
  m.attr("longest_seconds") = jobkit::detail::longest_seconds;
}

/// Frames of files under this directory are the package's own: the call site is the first
/// frame outside it.
std::string package_dir;

/// A Python exception raised by a signal handler while jobkit waited.
class python_interrupt : public py::error_already_set {};

/// A Python exception raised by a callable the helpers run: the other ranks get its short text
/// ("ValueError: boom", not the traceback), this rank the exception itself.
class python_callable_error : public std::runtime_error {
 public:
  explicit python_callable_error(const py::error_already_set& e)
      : std::runtime_error(std::string(py::str(e.type().attr("__name__"))) + ": " + std::string(py::str(e.value()))),
        error(e) {}
  py::error_already_set error;
};

/// Calls a Python callable from a helper (the GIL held).
template <class... A>
py::object call_python(const py::function& fn, A&&... args) {
  try {
    return fn(std::forward<A>(args)...);
  } catch (const python_interrupt&) {
    throw;
  } catch (const py::error_already_set& e) {
    throw python_callable_error(e);
  }
}

std::string python_site() {
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    std::string file = py::str(code->co_filename);
    Py_DECREF(code);
    if (package_dir.empty() || file.rfind(package_dir, 0) != 0) {
      const int line = PyFrame_GetLineNumber(frame);
      Py_DECREF(frame);
      if (const auto slash = file.rfind('/'); slash != std::string::npos) file.erase(0, slash + 1);
      return file + ":" + std::to_string(line);
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return "<python>";
}

/// Runs the Python signal handlers when a signal interrupts a wait; their exception (e.g.
/// KeyboardInterrupt) abandons the wait.
void run_python_signal_handlers() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw python_interrupt();
}

/// Connects to the launcher with the asynchronous signals blocked, so that the threads PMIx
/// starts inherit the mask: these signals then reach a Python thread, whose poll(2) they
/// interrupt, rather than a PMIx thread.
void start_runtime() {
  static bool started = false;  // guarded by the GIL
  if (started) return;
  sigset_t blocked;
  sigset_t previous;
  sigemptyset(&blocked);
  for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM}) sigaddset(&blocked, s);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  try {
    py::gil_scoped_release nogil;
    jobkit::default_runtime();
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  jobkit::detail::set_interrupt_hook(run_python_signal_handlers);
  started = true;
}

/// The message of an error raised in a call from `site`, naming this rank, its host and the site
/// where the C++ message does not already (e.g. an invalid argument).
std::string in_context(const std::string& message, const std::string& site) {
  const auto self = jobkit::detail::describe_self();
  std::string missing;
  if (message.find(self) == std::string::npos) missing = "on " + self;
  if (message.find(site) == std::string::npos) missing += (missing.empty() ? "at " : ", at ") + site;
  return missing.empty() ? message : message + " (" + missing + ")";
}

/// Runs fn without the GIL, with the Python caller as the call site of jobkit's messages. When a
/// signal handler's exception abandons a collective's wait, the world group is failed for the
/// other ranks (this rank left a collective half done) and the exception goes on.
template <bool collective = true, class F>
auto blocking(F&& fn) {
  start_runtime();
  jobkit::detail::call_site_override site(python_site());
  py::gil_scoped_release nogil;
  try {
    return fn();
  } catch (const jobkit::error& e) {
    throw jobkit::error(e.code(), in_context(e.what(), *jobkit::detail::current_call_site_override()),
                        e.native_status());
  } catch (const python_callable_error& e) {
    throw e.error;
  } catch (const python_interrupt&) {
    if (!collective) throw;
    try {
      jobkit::world().abort("a signal interrupted " + jobkit::detail::describe_self() + " in a jobkit call at " +
                            *jobkit::detail::current_call_site_override());
    } catch (const jobkit::error&) {  // no world to tell
    }
    throw;
  }
}

jobkit::call_options call_of(opt_ms timeout) { return {timeout_of(timeout)}; }

/// A callable the helpers run without the GIL: it takes the GIL and returns fn()'s bytes.
auto returning_bytes(const py::function& fn) {
  return [&fn]() -> std::string {
    py::gil_scoped_acquire gil;
    return bytes_of(call_python(fn));
  };
}

/// The same for a fn whose result stays in Python (the package keeps it).
auto returning_nothing(const py::function& fn) {
  return [&fn] {
    py::gil_scoped_acquire gil;
    call_python(fn);
  };
}

py::bytes bytes_from(const std::vector<std::byte>& data) {
  return py::bytes(reinterpret_cast<const char*>(data.data()), data.size());
}

std::span<const std::byte> span_of(const std::string& data) { return std::as_bytes(std::span(data)); }

/// A Workspace's or node_local_gather's group=, read from Python while the GIL is held: the world
/// (empty), "node" (nullopt) or world ranks.
using group_spec = std::optional<std::vector<int>>;

group_spec group_spec_of(const py::object& spec) {
  if (spec.is_none()) return std::vector<int>{};
  if (py::isinstance<py::str>(spec)) {
    const auto name = spec.cast<std::string>();
    if (name == "world") return std::vector<int>{};
    if (name == "node") return std::nullopt;
    throw jobkit::error(jobkit::errc::invalid_argument,
                        "group='" + name + "': 'world', 'node', None or a list of world ranks");
  }
  auto ranks = spec.cast<std::vector<int>>();
  if (ranks.empty()) throw jobkit::error(jobkit::errc::invalid_argument, "group=[]: a group needs a member");
  return ranks;
}

/// The group itself, made (collectively, for a list) without the GIL.
jobkit::group group_of(const group_spec& spec, opt_ms timeout) {
  if (!spec) return jobkit::node_group();
  if (spec->empty()) return jobkit::world();
  return jobkit::make_group(*spec, call_of(timeout));
}

/// The context-manager form of zero_first / local_zero_first: enter() waits (except on the
/// first rank), exit() releases the others (on the first rank), or fails them when the body raised.
class first_then_others {
 public:
  first_then_others(bool per_node, opt_ms timeout)
      : per_node_(per_node), options_(call_of(timeout)), helper_(per_node ? "local_zero_first" : "zero_first") {}

  void enter() {
    blocking([&] {
      using jobkit::detail::section_kind;
      site_ = *jobkit::detail::current_call_site_override();
      const auto& id = jobkit::current_identity();
      const auto section = jobkit::detail::current_section();
      if (per_node_ && section && section->kind == section_kind::node_leaders) {
        direct_ = jobkit::detail::nested_runs_directly(section_kind::node_leaders, helper_, {});
      } else {
        direct_ = jobkit::detail::nested_runs_directly(section_kind::staggered, helper_, {});
      }
      if (direct_) return;
      group_ = per_node_ ? jobkit::node_group() : jobkit::world();
      first_ = per_node_ ? id.local_rank == 0 : id.rank == 0;
      group_->setup(options_);
      if (!first_) group_->barrier(options_);
      guard_.emplace(section_kind::staggered, helper_, std::source_location::current());
    });
  }

  void exit(const std::optional<std::string>& raised) {
    guard_.reset();
    if (direct_ || !first_) return;
    if (raised) {
      group_->abort(std::string(helper_) + " at " + site_ + ": the body raised on " + jobkit::detail::describe_self() +
                    ": " + *raised);
      return;
    }
    blocking([&] { group_->barrier(options_); });
  }

 private:
  bool per_node_;
  jobkit::call_options options_;
  const char* helper_;
  std::string site_;
  bool direct_ = false;
  bool first_ = false;
  std::optional<jobkit::group> group_;
  std::optional<jobkit::detail::section_guard> guard_;
};

/// jobkit::errc -> Python exception type, indexed by the enumerator's value, and their base
/// jobkit.Error. Never freed: the types live as long as the interpreter.
std::vector<PyObject*> error_types;
PyObject* error_base = nullptr;

void define_errors(py::module_& m) {
  PyObject* base = PyErr_NewExceptionWithDoc("jobkit.Error",
                                             "A jobkit failure; `code` names its category (jobkit::errc), "
                                             "`native_status` the failed native call's status (0 when none).",
                                             PyExc_Exception, nullptr);
  m.attr("Error") = py::handle(base);
  error_base = base;
  struct kind {
    jobkit::errc code;
    const char* name;
    PyObject* also;
  };
  const kind kinds[] = {
      {jobkit::errc::invalid_environment, "InvalidEnvironmentError", nullptr},
      {jobkit::errc::invalid_argument, "InvalidArgumentError", PyExc_ValueError},
      {jobkit::errc::pmix, "PmixError", nullptr},
      {jobkit::errc::timeout, "TimeoutError", PyExc_TimeoutError},
      {jobkit::errc::peer_failure, "PeerFailureError", nullptr},
      {jobkit::errc::nccl, "NcclError", nullptr},
      {jobkit::errc::cuda, "CudaError", nullptr},
      {jobkit::errc::io, "IoError", nullptr},
      {jobkit::errc::scheduler, "SchedulerError", nullptr},
      {jobkit::errc::internal, "InternalError", nullptr},
  };
  error_types.assign(std::size(kinds), base);
  for (const auto& k : kinds) {
    py::tuple bases = k.also ? py::tuple(py::make_tuple(py::handle(base), py::handle(k.also)))
                             : py::tuple(py::make_tuple(py::handle(base)));
    PyObject* type = PyErr_NewException((std::string("jobkit.") + k.name).c_str(), bases.ptr(), nullptr);
    m.attr(k.name) = py::handle(type);
    error_types[static_cast<std::size_t>(k.code)] = type;
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const jobkit::error& e) {
      const auto index = static_cast<std::size_t>(e.code());
      auto* type = index < error_types.size() ? error_types[index] : error_base;  // a category added later
      py::object exc = py::reinterpret_borrow<py::object>(type)(e.what());
      exc.attr("code") = std::string(jobkit::to_string(e.code()));
      exc.attr("native_status") = e.native_status();
      PyErr_SetObject(type, exc.ptr());
    }
  });
}

void define_identity(py::module_& m) {
  m.def("identity", [] {
    start_runtime();
    const auto& id = jobkit::current_identity();
    return py::make_tuple(id.rank, id.world_size, id.local_rank, id.local_world_size, id.node_rank, id.num_nodes,
                          id.hostname, id.job_id, id.step_id, id.restart_count, id.array_job_id, id.array_task_id,
                          id.component, id.num_components, id.component_rank, id.component_size, id.component_nodes,
                          std::string(jobkit::to_string(id.source)));
  });
  m.def("connected_to_pmix", [] {
    start_runtime();
    return jobkit::default_runtime().connected_to_pmix();
  });
  m.def("rank_prefixed_message", [](const std::string& message) {
    start_runtime();
    return jobkit::rank_prefixed_message(message);
  });
  m.def("log_ranks_admit", [](const std::string& filter) {
    start_runtime();
    return jobkit::rank_filter::parse(filter, "JOBKIT_LOG_RANKS").admits(jobkit::current_identity());
  });
  m.def("data_path_addresses", [] {
    start_runtime();
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& a : jobkit::default_runtime().data_path_addresses()) out.emplace_back(a.interface, a.address);
    return out;
  });
  // `jobkit where`'s one rule of whether it is on, and of the stack dump's signal (src/where/settings.hpp),
  // for the dump `import jobkit` registers (_where.py). The step's report by itself, for torch's own
  // collectives (_torch_where.py): whether it reports at all, the rule of when, and the report, as for
  // jobkit's calls (src/where/watch.hpp).
  m.def("where_enabled", [] { return jobkit::where::enabled(); });
  m.def("where_stack_signal", [] { return jobkit::where::stack_signal(); });
  m.def("where_reports", [] { return jobkit::where::reports(); });
  m.def("where_report_after", [](double deadline_s) {
    const auto deadline = duration_of(deadline_s, "deadline_s");
    return static_cast<double>(jobkit::where::report_after(deadline).count()) / 1000;
  });
  m.def("where_report", [](int rank, const std::string& call, const std::string& site, long waited_s) {
    py::gil_scoped_release nogil;
    jobkit::where::report_call(rank, call, site, waited_s);
  });
}

void define_helpers(py::module_& m) {
  m.def("main_process_only_bytes", [](const py::function& fn, opt_ms timeout) {
    return py::bytes(blocking([&] { return jobkit::main_process_only(returning_bytes(fn), call_of(timeout)); }));
  });
  m.def("run_on_main_bytes",
        [](const py::function& fn, const py::function& post, bool run_post_on_main, opt_ms timeout) {
          return py::bytes(blocking([&] {
            return jobkit::run_on_main(returning_bytes(fn), returning_nothing(post),
                                       jobkit::run_on_main_options{run_post_on_main, timeout_of(timeout)});
          }));
        });
  m.def("once_per_node", [](const py::function& fn, opt_ms timeout) {
    blocking([&] { jobkit::once_per_node(returning_nothing(fn), call_of(timeout)); });
  });
  m.def("run_once_per_node",
        [](const py::function& fn, const py::function& post, bool run_post_on_all, opt_ms timeout) {
          blocking([&] {
            jobkit::run_once_per_node(returning_nothing(fn), returning_nothing(post),
                                      jobkit::run_once_per_node_options{run_post_on_all, timeout_of(timeout)});
          });
        });
  m.def("zero_first", [](const py::function& fn, opt_ms timeout) {
    blocking([&] { jobkit::zero_first(returning_nothing(fn), call_of(timeout)); });
  });
  m.def("local_zero_first", [](const py::function& fn, opt_ms timeout) {
    blocking([&] { jobkit::local_zero_first(returning_nothing(fn), call_of(timeout)); });
  });
  m.def("do_n_at_a_time", [](const py::function& fn, std::optional<int> n, opt_ms timeout) {
    blocking([&] {
      jobkit::do_n_at_a_time(returning_nothing(fn), jobkit::n_at_a_time_options{n, timeout_of(timeout)});
    });
  });
  m.def("fs_local_rank", [](const std::string& dir, opt_ms timeout) {
    return blocking([&] { return jobkit::fs_local_rank(dir, call_of(timeout)); });
  });
  py::class_<first_then_others>(m, "FirstThenOthers")
      .def(py::init<bool, opt_ms>())
      .def("enter", &first_then_others::enter)
      .def("exit", &first_then_others::exit);
}

void define_workspace(py::module_& m) {
  py::class_<jobkit::workspace>(m, "Workspace")
      .def(py::init([](const std::string& root, const py::object& members, opt_ms timeout) {
             const auto spec = group_spec_of(members);
             return blocking(
                 [&] { return std::make_unique<jobkit::workspace>(root, group_of(spec, timeout), call_of(timeout)); });
           }),
           py::arg("root"), py::arg("group") = py::none(), py::arg("timeout") = py::none())
      .def(
          "write",
          [](jobkit::workspace& ws, const py::bytes& payload, const std::string& config) {
            const auto data = std::string(payload);
            blocking<false>([&] { ws.write(config, span_of(data)); });
          },
          py::arg("payload"), py::arg("config") = "")
      .def(
          "read",
          [](const jobkit::workspace& ws, int rank, opt_ms timeout) {
            auto state = blocking<false>([&] { return ws.read(rank, call_of(timeout)); });
            return py::make_tuple(state.config, bytes_from(state.payload));
          },
          py::arg("rank"), py::arg("timeout") = py::none())
      .def("path_of", [](const jobkit::workspace& ws, int rank) { return ws.path_of(rank).string(); })
      .def_property_readonly("directory", [](const jobkit::workspace& ws) { return ws.directory().string(); });

  m.def("node_local_gather", [](const py::bytes& payload, const std::string& config, const py::object& members,
                                const std::string& workspace, std::size_t collective_max_bytes, opt_ms timeout) {
    const auto data = std::string(payload);
    const auto spec = group_spec_of(members);
    auto result = blocking([&] {
      jobkit::gather_options options{call_of(timeout), workspace, collective_max_bytes};
      return jobkit::node_local_gather(config, span_of(data), group_of(spec, timeout), options);
    });
    py::list states;
    for (const auto& s : result.states) states.append(py::make_tuple(s.config, bytes_from(s.payload)));
    return py::make_tuple(states, std::string(jobkit::to_string(result.route)));
  });
}

py::tuple cause_tuple(const jobkit::stop_cause& c) {
  return py::make_tuple(std::string(jobkit::to_string(c.reason)), c.signal, c.rank,
                        static_cast<double>(c.time_left.count()), jobkit::to_string(c));
}

void define_preemption(py::module_& m) {
  py::class_<jobkit::stop_guard>(m, "StopGuard")
      .def(py::init([](std::optional<std::vector<int>> signals, std::int64_t time_margin_ms, int check_every,
                       opt_ms timeout) {
             jobkit::stop_options options;
             if (signals) options.signals = *signals;
             options.time_margin = std::chrono::ceil<std::chrono::seconds>(std::chrono::milliseconds{time_margin_ms});
             options.check_every = check_every;
             options.timeout = timeout_of(timeout);
             return blocking([&] { return std::make_unique<jobkit::stop_guard>(options); });
           }),
           py::arg("signals") = py::none(), py::arg("time_margin_ms") = 0, py::arg("check_every") = 1,
           py::arg("timeout") = py::none())
      .def("stop_requested", [](jobkit::stop_guard& g) { return blocking([&] { return g.stop_requested(); }); })
      .def_property_readonly("cause", [](const jobkit::stop_guard& g) { return cause_tuple(g.cause()); });
  m.def("time_left", [](std::int64_t max_age_ms) {
    start_runtime();
    const auto left = jobkit::time_left(std::chrono::ceil<std::chrono::seconds>(std::chrono::milliseconds{max_age_ms}));
    return left ? std::optional<double>(static_cast<double>(left->count())) : std::nullopt;
  });
  m.def("requeue", [] { blocking<false>([] { jobkit::requeue(); }); });
  // Not collective, and quick: under the GIL. The runtime first, so that a hang names the rank.
  m.def("progress", [] {
    start_runtime();
    jobkit::progress();
  });
  m.def("long_step", [](std::int64_t bound_ms) {
    start_runtime();
    jobkit::long_step(std::chrono::milliseconds{bound_ms});
  });
  // torch's collectives as its flight recorder tells them, for progress tracking (_torch_where.py;
  // src/progress/tracker.hpp).
  m.def("progress_tracking", [] { return jobkit::detail::progress_tracking(); });
  m.def("progress_torch_collectives",
        [](const std::vector<std::tuple<std::string, std::string, std::int64_t>>& in_progress) {
          std::vector<jobkit::detail::torch_collective> calls;
          calls.reserve(in_progress.size());
          for (const auto& [call, site, since_ns] : in_progress) calls.push_back({call, site, since_ns});
          jobkit::detail::progress_torch_collectives(calls);
        });
  m.def("progress_torch_waits", [](const std::vector<std::pair<std::int64_t, std::int64_t>>& waits) {
    jobkit::detail::progress_torch_waits(waits);
  });

  py::class_<jobkit::checkpoints>(m, "Checkpoints")
      .def(py::init([](const std::string& root, int keep, opt_ms timeout, const std::string& memory, int shared_every,
                       int memory_keep, std::uint64_t memory_limit) {
             return blocking([&] {
               return std::make_unique<jobkit::checkpoints>(root,
                                                            jobkit::checkpoint_options{.keep = keep,
                                                                                       .timeout = timeout_of(timeout),
                                                                                       .memory = memory,
                                                                                       .shared_every = shared_every,
                                                                                       .memory_keep = memory_keep,
                                                                                       .memory_limit = memory_limit});
             });
           }),
           py::arg("root"), py::arg("keep") = 2, py::arg("timeout") = py::none(), py::arg("memory") = "",
           py::arg("shared_every") = 1, py::arg("memory_keep") = 1, py::arg("memory_limit") = 0)
      .def("latest", [](jobkit::checkpoints& c) { return blocking([&] { return c.latest(); }); })
      .def("begin", [](jobkit::checkpoints& c,
                       std::int64_t step) { return blocking<false>([&] { return c.begin(step).string(); }); })
      .def("commit", [](jobkit::checkpoints& c,
                        std::optional<std::int64_t> step) { blocking([&] { step ? c.commit(*step) : c.commit(); }); })
      .def("verify", [](jobkit::checkpoints& c, std::int64_t step) { blocking([&] { c.verify(step); }); })
      .def("part", [](const jobkit::checkpoints& c, std::int64_t step) { return c.part(step).string(); })
      .def("requeue",
           [](jobkit::checkpoints& c, const std::string& reason, int signal, int rank, double time_left) {
             // The seconds by the rule of spans (a StopCause a caller made may hold any float);
             // a finite negative one, past the job's end, counts as 0.
             const double seconds = std::isfinite(time_left) ? std::max(time_left, 0.0) : time_left;
             jobkit::stop_cause cause{jobkit::stop_reason::none, signal, rank,
                                      std::chrono::floor<std::chrono::seconds>(duration_of(seconds, "time_left"))};
             for (const auto r : {jobkit::stop_reason::signal, jobkit::stop_reason::time_limit}) {
               if (reason == jobkit::to_string(r)) cause.reason = r;
             }
             return blocking([&] { return c.requeue(cause); });
           })
      .def_property_readonly("memory_directory",
                             [](const jobkit::checkpoints& c) { return c.memory_directory().string(); })
      .def_property_readonly("pending_step", &jobkit::checkpoints::pending_step)
      .def_property_readonly("root", [](const jobkit::checkpoints& c) { return c.root().string(); })
      .def_property_readonly("is_committer", &jobkit::checkpoints::is_committer);
}

}  // namespace

namespace jobkit_python {

std::chrono::milliseconds timeout_of(opt_ms timeout) { return std::chrono::milliseconds{timeout.value_or(0)}; }

std::chrono::milliseconds duration_of(double seconds, std::string_view name) {
  const auto span = duration_rule.convert(seconds);
  if (!span) {
    throw jobkit::error(jobkit::errc::invalid_argument, fmt::format("{}={}: {}", name, seconds, duration_rule.text));
  }
  return *span;
}

std::string bytes_of(const py::handle& object) { return std::string(py::reinterpret_borrow<py::bytes>(object)); }

}  // namespace jobkit_python

PYBIND11_MODULE(_jobkit, m) {
  m.doc() = "jobkit's C++ library; use the package `jobkit`, which wraps this module.";
  m.attr("__version__") = JOBKIT_VERSION_STRING;
  m.def("set_package_dir", [](const std::string& dir) { package_dir = dir + "/"; });
  m.def("call_site", &python_site);
  define_errors(m);
  define_seconds_rules(m);  // core/timeout.hpp's rules of spans in seconds
  define_identity(m);
  // The device rule of <jobkit/nccl.hpp> (CUDA-free, so in every build): jobkit.select_device.
  m.def(
      "select_device",
      [](int visible_count, int local_rank, int local_world_size) {
        start_runtime();  // the rule's errors name this rank
        return jobkit::nccl::select_device(visible_count, local_rank, local_world_size);
      },
      py::arg("visible_count"), py::arg("local_rank"), py::arg("local_world_size"));
  define_helpers(m);
  define_workspace(m);
  define_preemption(m);
  jobkit_python::bind_tensor(m);  // groups, arrays in place
}
