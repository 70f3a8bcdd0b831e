#include "pmix/session.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include "core/backoff.hpp"
#include "core/bounded_call.hpp"
#include "core/environment.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"
#include "jobkit/log.hpp"
#include "log/library_log.hpp"
#include "pmix/gds_choice.hpp"
#include "pmix/library.hpp"
#include "pmix/values.hpp"
#include "pmix/versions.hpp"

namespace jobkit::detail {
namespace {

struct value_releaser {
  void operator()(pmix_value_t* value) const noexcept { release_value(value); }
};
using value_ptr = std::unique_ptr<pmix_value_t, value_releaser>;

/// PMIx_Get; with local_only (PMIX_OPTIONAL), the server is not asked: job data is already local.
value_ptr get_value(const pmix_proc_t& proc, const char* key, bool local_only, pmix_status_t* status) {
  pmix_info_t info{};
  load_info(info, PMIX_OPTIONAL, &local_only, PMIX_BOOL);
  pmix_value_t* value = nullptr;
  *status = pmix_api().PMIx_Get(&proc, key, &info, 1, &value);
  destruct_info(info);
  return value_ptr(*status == PMIX_SUCCESS ? value : nullptr);
}

std::vector<int> parse_rank_list(std::string_view text) {
  std::vector<int> ranks;
  std::string_view rest = text;
  while (!rest.empty()) {
    int rank = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), rank);
    if (ec != std::errc{}) return {};
    ranks.push_back(rank);
    rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
    if (!rest.empty() && rest.front() == ',') rest.remove_prefix(1);
  }
  return ranks;
}

}  // namespace

std::string pmix_status_text(pmix_status_t status) {
  return fmt::format("{} ({})", pmix_api().PMIx_Error_string(status), status);
}

namespace {

/// Set once a PMIx_Init ran past its deadline: that call still holds PMIx's locks and its
/// connection, so no PMIx call may follow in this process (PMIx_Initialized included).
std::atomic<bool> init_abandoned{false};

std::string init_timeout_message(std::chrono::milliseconds timeout) {
  const auto versions = pmix_versions(process_environment());
  const char* uri = nullptr;
  for (const char* name :
       {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"}) {
    if (std::getenv(name) != nullptr) {
      uri = name;
      break;
    }
  }
  return fmt::format(
      "PMIx_Init did not return within {} ms (JOBKIT_PMIX_INIT_TIMEOUT): the launcher's PMIx server{} never "
      "completed it. PMIx client library: {}; PMIx server: {}{}. A known cause: {}. The stuck PMIx_Init cannot be "
      "cancelled: it is left running, and this process must not use PMIx (nor MPI) again. `jobkit doctor` "
      "reports the versions and known-bad combinations",
      timeout.count(), uri ? fmt::format(" ({}={})", uri, std::getenv(uri)) : std::string(), versions.pmix_client,
      versions.pmix_server ? fmt::format("{} (PMIX_VERSION)", *versions.pmix_server)
                           : std::string("unknown (the launcher set no PMIX_VERSION)"),
      std::getenv("SLURM_JOB_ID") != nullptr ? "; launched by Slurm (`srun --version` names its release)" : "",
      known_init_hang());
}

}  // namespace

pmix_session::pmix_session() {
  std::memset(&self_, 0, sizeof self_);
  if (init_abandoned) {
    throw error(errc::pmix,
                "PMIx cannot be used in this process: an earlier PMIx_Init ran past JOBKIT_PMIX_INIT_TIMEOUT and "
                "never returned");
  }
  const auto timeout = pmix_init_timeout();
  pmix_status_t status = PMIX_SUCCESS;
  {
    gds_choice choice;
    // On a thread of its own, which holds the call's state: a PMIx_Init that returns after its
    // caller gave up writes there and nowhere else.
    bounded_call init([] {
      pmix_proc_t proc;
      std::memset(&proc, 0, sizeof proc);
      const pmix_status_t result = pmix_api().PMIx_Init(&proc, nullptr, 0);
      return std::pair{result, proc};
    });
    const auto done = init.wait(std::chrono::steady_clock::now() + timeout);
    if (!done) {
      init_abandoned = true;
      choice.keep();
      throw timeout_error(init_timeout_message(timeout), PMIX_ERR_TIMEOUT);
    }
    status = done->first;
    self_ = done->second;
    hash_store_ = choice.hash();
  }
  if (status != PMIX_SUCCESS) {
    throw error(errc::pmix,
                fmt::format("PMIx_Init failed: {}; the environment advertises a PMIx server "
                            "(PMIX_RANK, PMIX_NAMESPACE) that cannot be reached",
                            pmix_status_text(status)),
                status);
  }
}

pmix_session::~pmix_session() { pmix_api().PMIx_Finalize(nullptr, 0); }

void pmix_session::put(const std::string& key, std::span<const std::byte> bytes) {
  pmix_value_t value{};
  value.type = PMIX_BYTE_OBJECT;
  value.data.bo.bytes = reinterpret_cast<char*>(const_cast<std::byte*>(bytes.data()));
  value.data.bo.size = bytes.size();
  const pmix_status_t status = pmix_api().PMIx_Put(PMIX_GLOBAL, key.c_str(), &value);
  if (status != PMIX_SUCCESS) {
    throw error(errc::pmix, fmt::format("PMIx_Put({}) failed: {}", key, pmix_status_text(status)), status);
  }
}

namespace {

/// PMIX_TIMEOUT's value for a wait: whole seconds, rounded up, at least 1.
int pmix_timeout_seconds(std::chrono::milliseconds wait) {
  return static_cast<int>(std::max<long long>(1, (wait.count() + 999) / 1000));
}

/// A non-blocking fence in flight. PMIx's own PMIX_TIMEOUT bounds only the node-local phase and a
/// rank that never connected is never reported, so jobkit waits with its own deadline. A pending
/// fence cannot be cancelled: on expiry this state stays alive until PMIx calls back.
struct fence_wait {
  std::mutex mutex;
  std::condition_variable done_signal;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
  pmix_info_t info[2]{};
  bool collect = true;
  int seconds = 0;

  static void on_done(pmix_status_t status, void* data) {
    auto* self = static_cast<std::shared_ptr<fence_wait>*>(data);
    {
      std::lock_guard lock((*self)->mutex);
      (*self)->status = status;
      (*self)->done = true;
    }
    (*self)->done_signal.notify_all();
    delete self;
  }
  ~fence_wait() {
    destruct_info(info[0]);
    destruct_info(info[1]);
  }
};

/// Held across each of jobkit's fences: fences over one process set are matched in the order each
/// process calls them, so two threads of one rank must never have two in flight (the data path's
/// set-up and an NCCL id exchange, say).
std::mutex fence_order;

}  // namespace

void pmix_session::fence(const time_bound& bound, const std::function<void()>& while_waiting) {
  const std::scoped_lock one_at_a_time(fence_order);
  pmix_status_t status = pmix_api().PMIx_Commit();
  if (status != PMIX_SUCCESS) {
    throw error(errc::pmix, fmt::format("PMIx_Commit failed: {}", pmix_status_text(status)), status);
  }
  auto wait = std::make_shared<fence_wait>();
  wait->seconds = pmix_timeout_seconds(bound.left());
  load_info(wait->info[0], PMIX_COLLECT_DATA, &wait->collect, PMIX_BOOL);
  load_info(wait->info[1], PMIX_TIMEOUT, &wait->seconds, PMIX_INT);
  auto* handle = new std::shared_ptr<fence_wait>(wait);
  status = pmix_api().PMIx_Fence_nb(nullptr, 0, wait->info, 2, &fence_wait::on_done, handle);
  if (status != PMIX_SUCCESS) {
    delete handle;
    throw error(errc::pmix, fmt::format("PMIx_Fence_nb failed: {}", pmix_status_text(status)), status);
  }
  const auto deadline = bound.deadline;
  std::unique_lock lock(wait->mutex);
  checked_wait(
      lock, wait->done_signal, deadline, [&] { return wait->done; }, while_waiting);
  // PMIX_TIMEOUT carries this same deadline, so the launcher may report it first; before the
  // deadline, a timeout is the launcher's own (for Slurm: SLURM_PMIX_TIMEOUT).
  const bool past_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200) >= deadline;
  if (!wait->done || (wait->status == PMIX_ERR_TIMEOUT && past_deadline)) {
    throw timeout_error(fmt::format("the PMIx fence over all ranks timed out after {} ms: a rank never arrived "
                                    "(it is late or stuck, or it exited before reaching jobkit)",
                                    bound.timeout.count()),
                        PMIX_ERR_TIMEOUT);
  }
  status = wait->status;
  if (status == PMIX_ERR_TIMEOUT) {
    throw timeout_error(
        "the PMIx fence over all ranks timed out in the launcher (for Slurm: SLURM_PMIX_TIMEOUT, "
        "300 s by default): a rank never arrived",
        status);
  }
  if (status != PMIX_SUCCESS) {
    throw error(errc::pmix, fmt::format("PMIx_Fence failed: {} (a rank may have died)", pmix_status_text(status)),
                status);
  }
}

namespace {

/// The answers to several PMIx_Get_nb calls for one key; outlives the caller when PMIx answers late.
struct gets_wait {
  std::mutex mutex;
  std::condition_variable answered;
  std::vector<pmix_status_t> status;                         // per rank; PMIX_ERR_TIMEOUT until answered
  std::vector<std::optional<std::vector<std::byte>>> bytes;  // per rank, when the answer could be read
  std::vector<std::string> refusal;                          // per rank, why an answer could not be read
  int pending = 0;
  // The requests' PMIX_TIMEOUT, when set (server_wait): PMIx_Get_nb reads it in its progress
  // thread, after it returned; every request holds this state until its callback.
  pmix_info_t timeout{};
  bool has_timeout = false;
  ~gets_wait() {
    if (has_timeout) destruct_info(timeout);
  }
};

struct get_call {
  std::shared_ptr<gets_wait> wait;
  int rank;
  std::string key;
  static void on_value(pmix_status_t status, pmix_value_t* value, void* data) {
    auto* call = static_cast<get_call*>(data);
    const value_ptr owned(value);  // PMIx hands the value over to the callback
    {
      std::lock_guard lock(call->wait->mutex);
      const auto r = static_cast<std::size_t>(call->rank);
      call->wait->status[r] = status;
      if (status == PMIX_SUCCESS && value != nullptr) {
        try {  // nothing may escape into PMIx's thread
          call->wait->bytes[r] = pmix_bytes(*value, call->key + fmt::format(" of rank {}", call->rank));
        } catch (const std::exception& e) {
          call->wait->refusal[r] = e.what();
        }
      }
      --call->wait->pending;
    }
    call->wait->answered.notify_all();
    delete call;
  }
};

/// What get_each found: per rank of the world, the status (PMIX_ERR_TIMEOUT when no answer came,
/// PMIX_SUCCESS for ranks not asked), the bytes of an answer, and why an answer could not be read.
struct gets {
  std::vector<pmix_status_t> status;
  std::vector<std::optional<std::vector<std::byte>>> bytes;
  std::vector<std::string> refusal;
};

/// Asks for `key` of every rank in `ranks` at once (PMIx_Get_nb), and waits until all answered
/// or until `until`, running `while_waiting` (when set) every 50 ms meanwhile; an exception from it
/// ends the wait. `server_wait`, when set, is how long the server may hold each request
/// (PMIX_TIMEOUT): without it, PMIx's server answers a read of a node-mate's key that is not
/// committed yet with PMIX_ERR_TIMEOUT after 2 s (its default in pmix_server_get.c).
gets get_each(const char* nspace, const std::string& key, const std::vector<int>& ranks, int world_size,
              std::optional<std::chrono::milliseconds> server_wait, std::chrono::steady_clock::time_point until,
              const std::function<void()>& while_waiting = {}) {
  auto wait = std::make_shared<gets_wait>();
  if (server_wait) {
    int seconds = pmix_timeout_seconds(*server_wait);
    load_info(wait->timeout, PMIX_TIMEOUT, &seconds, PMIX_INT);
    wait->has_timeout = true;
  }
  const auto n = static_cast<std::size_t>(world_size);
  wait->status.assign(n, PMIX_SUCCESS);
  wait->bytes.resize(n);
  wait->refusal.resize(n);
  for (const int r : ranks) wait->status[static_cast<std::size_t>(r)] = PMIX_ERR_TIMEOUT;
  for (const int r : ranks) {
    const pmix_proc_t proc = proc_of(nspace, static_cast<pmix_rank_t>(r));
    auto* call = new get_call{wait, r, key};
    {
      std::lock_guard lock(wait->mutex);
      ++wait->pending;
    }
    if (const pmix_status_t status =
            pmix_api().PMIx_Get_nb(&proc, key.c_str(), wait->has_timeout ? &wait->timeout : nullptr,
                                   wait->has_timeout ? 1 : 0, &get_call::on_value, call);
        status != PMIX_SUCCESS) {
      std::lock_guard lock(wait->mutex);
      wait->status[static_cast<std::size_t>(r)] = status;
      --wait->pending;
      delete call;
    }
  }
  std::unique_lock lock(wait->mutex);
  checked_wait(
      lock, wait->answered, until, [&] { return wait->pending == 0; }, while_waiting);
  // A late answer writes only its own rank's entries, which are still empty: the others can move.
  gets found{wait->status, {}, {}};
  found.bytes.resize(n);
  found.refusal.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (wait->bytes[r]) found.bytes[r] = std::move(wait->bytes[r]);
    if (!wait->refusal[r].empty()) found.refusal[r] = std::move(wait->refusal[r]);
  }
  return found;
}

}  // namespace

rendezvous::roll_call pmix_session::ranks_without(const std::string& key, int world_size,
                                                  std::chrono::milliseconds probe) {
  roll_call call;
  call.asked = query_facts().local_peers;
  std::vector<int> others;
  for (const int r : call.asked) {
    if (r != static_cast<int>(self_.rank) && r >= 0 && r < world_size) others.push_back(r);
  }
  const auto found = get_each(self_.nspace, key, others, world_size, probe,
                              std::chrono::steady_clock::now() + probe + std::chrono::seconds(1));
  for (const int r : call.asked) {
    if (r >= 0 && r < world_size && found.status[static_cast<std::size_t>(r)] != PMIX_SUCCESS) call.absent.push_back(r);
  }
  return call;
}

namespace {

/// The answer for `rank` in what get_each found. @throws jobkit::timeout_error when none came
/// (naming `timeout`), jobkit::error when PMIx failed or the value could not be read
std::vector<std::byte> answer_of(gets& found, int rank, const std::string& key, std::chrono::milliseconds timeout) {
  const auto i = static_cast<std::size_t>(rank);
  if (found.bytes[i]) return std::move(*found.bytes[i]);
  const pmix_status_t status = found.status[i];
  if (status == PMIX_ERR_TIMEOUT) {
    throw timeout_error(
        fmt::format("PMIx_Get({}) of rank(s) {} gave no answer within {} ms", key, rank, timeout.count()), status);
  }
  if (status == PMIX_SUCCESS) {
    throw error(errc::pmix, found.refusal[i].empty()
                                ? fmt::format("PMIx_Get({}) of rank {} returned no value", key, rank)
                                : found.refusal[i]);
  }
  throw error(errc::pmix, fmt::format("PMIx_Get({}) of rank {} failed: {}", key, rank, pmix_status_text(status)),
              status);
}

}  // namespace

std::vector<std::byte> pmix_session::get(int rank, const std::string& key, std::chrono::milliseconds timeout,
                                         const std::function<void()>& while_waiting) {
  auto found = get_each(self_.nspace, key, {rank}, rank + 1, std::nullopt, std::chrono::steady_clock::now() + timeout,
                        while_waiting);
  return answer_of(found, rank, key, timeout);
}

std::vector<std::vector<std::byte>> pmix_session::get_all(const std::string& key, int world_size,
                                                          std::chrono::milliseconds timeout) {
  // With the hash store every value is a request to the server: all of them in flight at once
  // took 45 ms on 1 node x 4 ranks (one after another: 1 to 9 ms).
  // Either way every request is bounded by the deadline: a fence that returned does not prove that
  // every rank put the key (Slurm 24.11's server ended the fence on some ranks of a node whose other
  // rank exited before PMIx_Init; a blocking PMIx_Get of that rank's key then never returned).
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::vector<int> everyone(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) everyone[static_cast<std::size_t>(r)] = r;
  if (hash_store_) {
    std::vector<std::vector<std::byte>> values;
    values.reserve(everyone.size());
    for (const int r : everyone) {
      auto one = get_each(self_.nspace, key, {r}, world_size, std::nullopt, until);
      values.push_back(answer_of(one, r, key, timeout));
    }
    return values;
  }
  auto found = get_each(self_.nspace, key, everyone, world_size, std::nullopt, until);
  std::vector<int> late;
  for (int r = 0; r < world_size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (found.bytes[i]) continue;
    if (found.status[i] == PMIX_ERR_TIMEOUT) {
      late.push_back(r);
    } else {
      answer_of(found, r, key, timeout);  // throws: PMIx failed, or the value could not be read
    }
  }
  if (!late.empty()) {
    throw timeout_error(fmt::format("PMIx_Get({}) of rank(s) {} gave no answer within {} ms", key,
                                    fmt::join(late, ", "), timeout.count()),
                        PMIX_ERR_TIMEOUT);
  }
  std::vector<std::vector<std::byte>> values;
  values.reserve(found.bytes.size());
  for (auto& v : found.bytes) values.push_back(std::move(*v));
  return values;
}

std::vector<std::byte> pmix_session::await(int rank, const std::string& key, std::chrono::milliseconds timeout,
                                           const std::function<void()>& while_waiting) {
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + timeout;
  backoff pauses(std::chrono::milliseconds(5), std::chrono::milliseconds(100));
  while (true) {
    // The server holds the read (a node-mate slow to its first collective, e.g. a long import, is
    // waited for), not for its 2 s default but for at most held_read at a time, then asked again:
    // a node-mate's read of a key that its rank's next process committed was once never answered
    // (Slurm 22.05, PMIx 4.2, under load; likely held for the rank's earlier process), and a new
    // read is a new request.
    const auto asked = std::chrono::steady_clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - asked);
    auto found = get_each(self_.nspace, key, {rank}, rank + 1, std::min(left, held_read), until, while_waiting);
    const auto i = static_cast<std::size_t>(rank);
    const auto status = found.status[i];
    const auto now = std::chrono::steady_clock::now();
    if (const auto pause = pauses.next(); !found.bytes[i] && status == PMIX_ERR_NOT_FOUND && now + pause < until) {
      if (while_waiting) while_waiting();
      pause_until(pause, until);
      continue;
    }
    // This read's own time ran out, not the deadline: asked again.
    if (!found.bytes[i] && status == PMIX_ERR_TIMEOUT && left > held_read &&
        now >= asked + held_read - std::chrono::milliseconds(100) && now + std::chrono::milliseconds(200) < until) {
      continue;
    }
    // Slurm ends a direct get that its owner has not answered after SLURM_PMIX_TIMEOUT (measured
    // under 22.05: ERROR, -1).
    if (!found.bytes[i] && (status == PMIX_ERR_TIMEOUT || status == PMIX_ERROR) &&
        now + std::chrono::milliseconds(200) < until) {
      throw timeout_error(
          fmt::format("PMIx_Get({}) of rank {} timed out in the launcher (for Slurm: SLURM_PMIX_TIMEOUT, 300 s by "
                      "default) after {} ms, answering {}: rank {} never published it (late, stuck, or exited before "
                      "reaching jobkit)",
                      key, rank, std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count(),
                      pmix_status_text(status), rank),
          status);
    }
    return answer_of(found, rank, key, timeout);
  }
}

void pmix_session::commit() {
  if (const pmix_status_t status = pmix_api().PMIx_Commit(); status != PMIX_SUCCESS) {
    throw error(errc::pmix, fmt::format("PMIx_Commit failed: {}", pmix_status_text(status)), status);
  }
}

std::optional<job_placement> pmix_session::placement() {
  // Under Slurm, a direct get is answered only in a step on the job's first nodes (facts.hpp);
  // elsewhere the endpoints go through one collecting fence, which Slurm routes right.
  const auto& env = process_environment();
  auto job_nodes = env.get("SLURM_JOB_NODELIST");
  if (!job_nodes) job_nodes = env.get("SLURM_NODELIST");
  const auto step_nodes = env.get("SLURM_STEP_NODELIST");
  if (const auto why = slurm_direct_modex_misrouted(step_nodes, job_nodes)) {
    detail::library_log(log_level::debug, "data path: endpoints through a collecting fence, not read on demand: {}",
                        *why);
    return std::nullopt;
  }
  const pmix_proc_t job = proc_of(self_.nspace, PMIX_RANK_WILDCARD);
  pmix_status_t status = PMIX_SUCCESS;
  const auto size_value = get_value(job, PMIX_JOB_SIZE, true, &status);
  if (!size_value) return std::nullopt;
  const int size = pmix_count(*size_value, "PMIX_JOB_SIZE");
  char* list = nullptr;
  status = pmix_api().PMIx_Resolve_nodes(self_.nspace, &list);
  const std::string nodes = status == PMIX_SUCCESS && list != nullptr ? list : "";
  std::free(list);
  auto incomplete = [&](const std::string& why) -> std::optional<job_placement> {
    detail::library_log(log_level::debug,
                        "data path: the launcher's placement of the ranks is incomplete ({}); setting up through a "
                        "collecting fence",
                        why);
    return std::nullopt;
  };
  if (nodes.empty()) return incomplete(fmt::format("PMIx_Resolve_nodes: {}", pmix_status_text(status)));
  job_placement p;
  p.node_of.assign(static_cast<std::size_t>(size), -1);
  p.local_rank_of.assign(static_cast<std::size_t>(size), -1);
  for (std::string_view rest = nodes; !rest.empty();) {
    const auto comma = rest.find(',');
    p.nodes.emplace_back(rest.substr(0, comma));
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
  }
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    pmix_proc_t* procs = nullptr;
    std::size_t count = 0;
    status = pmix_api().PMIx_Resolve_peers(p.nodes[n].c_str(), self_.nspace, &procs, &count);
    if (status != PMIX_SUCCESS) {
      return incomplete(fmt::format("PMIx_Resolve_peers({}): {}", p.nodes[n], pmix_status_text(status)));
    }
    std::vector<int> ranks;
    for (std::size_t i = 0; i < count; ++i) ranks.push_back(static_cast<int>(procs[i].rank));
    std::free(procs);  // PMIX_PROC_FREE: a pmix_proc_t holds no pointers
    std::sort(ranks.begin(), ranks.end());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const int r = ranks[i];
      if (r < 0 || r >= size || p.node_of[static_cast<std::size_t>(r)] != -1) {
        return incomplete(fmt::format("rank {} listed on {} is out of range or on two nodes", r, p.nodes[n]));
      }
      p.node_of[static_cast<std::size_t>(r)] = static_cast<int>(n);
      p.local_rank_of[static_cast<std::size_t>(r)] = static_cast<int>(i);
    }
  }
  if (const auto it = std::find(p.node_of.begin(), p.node_of.end(), -1); it != p.node_of.end()) {
    return incomplete(fmt::format("rank {} is on no node", it - p.node_of.begin()));
  }
  return p;
}

pmix_facts pmix_session::query_facts() const {
  const pmix_proc_t job = proc_of(self_.nspace, PMIX_RANK_WILDCARD);

  auto number = [&](const pmix_proc_t& proc, const char* key, const char* name) -> std::optional<int> {
    pmix_status_t status = PMIX_SUCCESS;
    auto value = get_value(proc, key, true, &status);
    if (!value) {
      if (status == PMIX_ERR_NOT_FOUND) return std::nullopt;
      throw error(errc::pmix, fmt::format("PMIx_Get({}) failed: {}", name, pmix_status_text(status)), status);
    }
    return pmix_count(*value, name);
  };
  auto required = [&](const pmix_proc_t& proc, const char* key, const char* name) {
    auto n = number(proc, key, name);
    if (!n) throw error(errc::pmix, fmt::format("the PMIx server does not provide {}", name));
    return *n;
  };

  pmix_facts facts;
  facts.nspace = self_.nspace;
  facts.rank = static_cast<int>(self_.rank);
  facts.world_size = required(job, PMIX_JOB_SIZE, "PMIX_JOB_SIZE");
  facts.local_rank = required(self_, PMIX_LOCAL_RANK, "PMIX_LOCAL_RANK");
  facts.local_world_size = required(job, PMIX_LOCAL_SIZE, "PMIX_LOCAL_SIZE");
  // The node's rank and the number of nodes: from the job's node list (place_in_node_list has the
  // policy). PMIX_NODEID and PMIX_NUM_NODES only where the server lists no nodes or no hostname:
  // under PRRTE node ids can have gaps and PMIX_NUM_NODES differs between ranks of one job
  // (docs/launchers.md).
  const auto node_id = number(self_, PMIX_NODEID, "PMIX_NODEID");
  std::optional<std::string> hostname;
  {
    pmix_status_t status = PMIX_SUCCESS;
    if (auto value = get_value(self_, PMIX_HOSTNAME, true, &status)) hostname = pmix_text(*value, "PMIX_HOSTNAME");
  }
  char* node_list = nullptr;
  const pmix_status_t listed = pmix_api().PMIx_Resolve_nodes(self_.nspace, &node_list);
  const std::string nodes = listed == PMIX_SUCCESS && node_list != nullptr ? node_list : "";
  std::free(node_list);
  if (!nodes.empty() && hostname) {
    const auto place = place_in_node_list(nodes, *hostname);
    facts.node_rank = place.node_rank;
    facts.num_nodes = place.num_nodes;
    facts.node_origin = fmt::format("position of PMIX_HOSTNAME='{}' in PMIx_Resolve_nodes='{}'{}", *hostname, nodes,
                                    node_id ? fmt::format(", PMIX_NODEID={}", *node_id) : std::string());
  } else {
    if (!node_id) throw error(errc::pmix, "the PMIx server provides neither a node list nor PMIX_NODEID");
    facts.node_rank = *node_id;
    auto count = number(job, PMIX_NUM_NODES, "PMIX_NUM_NODES");
    if (!count) {
      throw error(
          errc::pmix,
          fmt::format("the PMIx server provides neither PMIX_NUM_NODES nor a node list: {}", pmix_status_text(listed)),
          listed);
    }
    facts.num_nodes = *count;
    facts.node_origin = fmt::format("PMIX_NODEID={}, PMIX_NUM_NODES={}", *node_id, *count);
  }

  pmix_status_t status = PMIX_SUCCESS;
  if (auto peers = get_value(job, PMIX_LOCAL_PEERS, true, &status)) {
    facts.local_peers = parse_rank_list(pmix_text(*peers, "PMIX_LOCAL_PEERS"));
  }
  return facts;
}

}  // namespace jobkit::detail
