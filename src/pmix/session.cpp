#include "pmix/session.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

struct value_releaser {
  void operator()(pmix_value_t* value) const noexcept { PMIX_VALUE_RELEASE(value); }
};
using value_ptr = std::unique_ptr<pmix_value_t, value_releaser>;

/// PMIx_Get; with local_only (PMIX_OPTIONAL), the server is not asked: job data is already local.
value_ptr get_value(const pmix_proc_t& proc, const char* key, bool local_only, pmix_status_t* status) {
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &local_only, PMIX_BOOL);
  pmix_value_t* value = nullptr;
  *status = PMIx_Get(&proc, key, &info, 1, &value);
  PMIX_INFO_DESTRUCT(&info);
  return value_ptr(*status == PMIX_SUCCESS ? value : nullptr);
}

std::optional<long long> to_number(const pmix_value_t& v) {
  switch (v.type) {
    case PMIX_UINT8: return v.data.uint8;
    case PMIX_UINT16: return v.data.uint16;
    case PMIX_UINT32: return v.data.uint32;
    case PMIX_UINT64: return static_cast<long long>(v.data.uint64);
    case PMIX_INT8: return v.data.int8;
    case PMIX_INT16: return v.data.int16;
    case PMIX_INT32: return v.data.int32;
    case PMIX_INT64: return v.data.int64;
    case PMIX_INT: return v.data.integer;
    case PMIX_UINT: return v.data.uint;
    case PMIX_SIZE: return static_cast<long long>(v.data.size);
    case PMIX_PROC_RANK: return v.data.rank;
    default: return std::nullopt;
  }
}

std::vector<int> parse_rank_list(const char* text) {
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

/// PMIx_Init picks the store through which its server hands it the job's data and the other ranks'
/// values from PMIX_GDS_MODULE, the list the launcher offers (Slurm 22.05: "ds21,ds12,hash"). With
/// a shared-memory store (ds21, ds12), each node's server creates and zero-fills two 4 MiB files in
/// its spool directory when the step's first client asks for its job data, and every client of the
/// node waits for it: measured on the dev cluster, PMIx_Init took 40 ms alone, 8 ms with "hash",
/// which has the server send the job data in its reply instead. But with "hash" every other rank's
/// value is a request to the server (3 nodes x 24 ranks: 16-24 ms for the endpoint records, against
/// 1-5 ms read in place), a cost that grows with the job while the saving is fixed. So by default
/// (JOBKIT_PMIX_GDS=auto) jobkit asks for "hash" where the launcher offers it and the step has at
/// most small_step_ranks ranks by the launcher's own count (SLURM_STEP_NUM_TASKS, or
/// OMPI_COMM_WORLD_SIZE under mpirun); "hash" asks for it whatever the size, "launcher" never. The
/// variable is changed for the duration of PMIx_Init only and only where the launcher set it (an
/// in-place replacement, never a new entry), and not at all when PMIx is already initialised in this
/// process (by MPI, say).
class gds_choice {
 public:
  gds_choice() {
    static constexpr const char* name = "PMIX_GDS_MODULE";
    const char* mode = std::getenv("JOBKIT_PMIX_GDS");
    const std::string_view setting = mode == nullptr || *mode == '\0' ? "auto" : mode;
    if (setting != "auto" && setting != "hash" && setting != "launcher") {
      throw error(errc::invalid_environment,
                  fmt::format("JOBKIT_PMIX_GDS='{}' is not one of auto, hash, launcher", setting));
    }
    const std::string_view wanted = "hash";
    const char* offered = std::getenv(name);
    if (PMIx_Initialized()) return;
    hash_ = offered != nullptr && std::string_view(offered) == wanted;
    if (setting == "launcher" || offered == nullptr) return;
    if (setting == "auto" && !small_step()) return;
    std::string_view rest = offered;
    bool listed = false;
    while (!rest.empty() && !listed) {
      const auto comma = rest.find(',');
      listed = rest.substr(0, comma) == wanted;
      rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
    }
    if (!listed || hash_) return;
    original_ = offered;
    ::setenv(name, std::string(wanted).c_str(), 1);
    hash_ = true;
  }
  /// Whether this PMIx_Init asks the server for the hash store.
  bool hash() const noexcept { return hash_; }
  static constexpr long small_step_ranks = 16;
  ~gds_choice() {
    if (original_) ::setenv("PMIX_GDS_MODULE", original_->c_str(), 1);
  }
  gds_choice(const gds_choice&) = delete;
  gds_choice& operator=(const gds_choice&) = delete;

 private:
  /// Whether the launcher says this step has at most small_step_ranks ranks (unknown: no).
  static bool small_step() {
    for (const char* variable : {"SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"}) {
      const char* value = std::getenv(variable);
      if (value == nullptr) continue;
      long ranks = 0;
      const std::string_view text = value;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ranks);
      return ec == std::errc{} && end == text.data() + text.size() && ranks >= 1 && ranks <= small_step_ranks;
    }
    return false;
  }

  std::optional<std::string> original_;
  bool hash_ = false;
};

}  // namespace

std::string pmix_status_text(pmix_status_t status) { return fmt::format("{} ({})", PMIx_Error_string(status), status); }

pmix_session::pmix_session() {
  std::memset(&self_, 0, sizeof self_);
  pmix_status_t status = PMIX_SUCCESS;
  {
    const gds_choice choice;
    status = PMIx_Init(&self_, nullptr, 0);
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

pmix_session::~pmix_session() { PMIx_Finalize(nullptr, 0); }

void pmix_session::put(const std::string& key, std::span<const std::byte> bytes) {
  pmix_value_t value;
  PMIX_VALUE_CONSTRUCT(&value);
  value.type = PMIX_BYTE_OBJECT;
  value.data.bo.bytes = reinterpret_cast<char*>(const_cast<std::byte*>(bytes.data()));
  value.data.bo.size = bytes.size();
  const pmix_status_t status = PMIx_Put(PMIX_GLOBAL, key.c_str(), &value);
  if (status != PMIX_SUCCESS) {
    throw error(errc::pmix, fmt::format("PMIx_Put({}) failed: {}", key, pmix_status_text(status)), status);
  }
}

namespace {

/// A non-blocking fence in flight. PMIx's own PMIX_TIMEOUT bounds only the node-local phase and a
/// rank that never connected is never reported, so jobkit waits with its own deadline. A pending
/// fence cannot be cancelled: on expiry this state stays alive until PMIx calls back.
struct fence_wait {
  std::mutex mutex;
  std::condition_variable done_signal;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
  pmix_info_t info[2];
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
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
  }
};

}  // namespace

void pmix_session::fence(std::chrono::milliseconds timeout, const std::function<void()>& while_waiting) {
  pmix_status_t status = PMIx_Commit();
  if (status != PMIX_SUCCESS) {
    throw error(errc::pmix, fmt::format("PMIx_Commit failed: {}", pmix_status_text(status)), status);
  }
  auto wait = std::make_shared<fence_wait>();
  wait->seconds = static_cast<int>(std::max<long long>(1, (timeout.count() + 999) / 1000));
  PMIX_INFO_LOAD(&wait->info[0], PMIX_COLLECT_DATA, &wait->collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&wait->info[1], PMIX_TIMEOUT, &wait->seconds, PMIX_INT);
  auto* handle = new std::shared_ptr<fence_wait>(wait);
  status = PMIx_Fence_nb(nullptr, 0, wait->info, 2, &fence_wait::on_done, handle);
  if (status != PMIX_SUCCESS) {
    delete handle;
    throw error(errc::pmix, fmt::format("PMIx_Fence_nb failed: {}", pmix_status_text(status)), status);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(wait->mutex);
  while (!wait->done && std::chrono::steady_clock::now() < deadline) {
    const auto step = while_waiting ? std::chrono::milliseconds(50) : timeout;
    wait->done_signal.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + step),
                                 [&] { return wait->done; });
    if (!wait->done && while_waiting) {
      lock.unlock();
      while_waiting();
      lock.lock();
    }
  }
  // PMIX_TIMEOUT carries this same deadline, so the launcher may report it first; before the
  // deadline, a timeout is the launcher's own (for Slurm: SLURM_PMIX_TIMEOUT).
  const bool past_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200) >= deadline;
  if (!wait->done || (wait->status == PMIX_ERR_TIMEOUT && past_deadline)) {
    throw timeout_error(fmt::format("the PMIx fence over all ranks timed out after {} ms: a rank never arrived "
                                    "(it is late or stuck, or it exited before reaching jobkit)",
                                    timeout.count()),
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
  std::vector<std::optional<std::vector<std::byte>>> bytes;  // per rank, when the answer is a byte object
  int pending = 0;
};

struct get_call {
  std::shared_ptr<gets_wait> wait;
  int rank;
  static void on_value(pmix_status_t status, pmix_value_t* value, void* data) {
    auto* call = static_cast<get_call*>(data);
    const value_ptr owned(value);  // PMIx hands the value over to the callback
    {
      std::lock_guard lock(call->wait->mutex);
      const auto r = static_cast<std::size_t>(call->rank);
      call->wait->status[r] = status;
      if (status == PMIX_SUCCESS && value != nullptr && value->type == PMIX_BYTE_OBJECT) {
        const auto* begin = reinterpret_cast<const std::byte*>(value->data.bo.bytes);
        call->wait->bytes[r].emplace(begin, begin + value->data.bo.size);
      }
      --call->wait->pending;
    }
    call->wait->answered.notify_all();
    delete call;
  }
};

/// What get_each found: per rank of the world, the status (PMIX_ERR_TIMEOUT when no answer came,
/// PMIX_SUCCESS for ranks not asked) and the bytes of a byte-object answer.
struct gets {
  std::vector<pmix_status_t> status;
  std::vector<std::optional<std::vector<std::byte>>> bytes;
};

/// Asks for `key` of every rank in `ranks` at once (PMIx_Get_nb, with `info`), and waits until
/// all answered or until `until`.
gets get_each(const char* nspace, const std::string& key, const std::vector<int>& ranks, int world_size,
              const pmix_info_t* info, std::size_t ninfo, std::chrono::steady_clock::time_point until) {
  auto wait = std::make_shared<gets_wait>();
  const auto n = static_cast<std::size_t>(world_size);
  wait->status.assign(n, PMIX_SUCCESS);
  wait->bytes.resize(n);
  for (const int r : ranks) wait->status[static_cast<std::size_t>(r)] = PMIX_ERR_TIMEOUT;
  for (const int r : ranks) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, static_cast<pmix_rank_t>(r));
    auto* call = new get_call{wait, r};
    {
      std::lock_guard lock(wait->mutex);
      ++wait->pending;
    }
    if (const pmix_status_t status = PMIx_Get_nb(&proc, key.c_str(), info, ninfo, &get_call::on_value, call);
        status != PMIX_SUCCESS) {
      std::lock_guard lock(wait->mutex);
      wait->status[static_cast<std::size_t>(r)] = status;
      --wait->pending;
      delete call;
    }
  }
  std::unique_lock lock(wait->mutex);
  wait->answered.wait_until(lock, until, [&] { return wait->pending == 0; });
  // A late answer writes only its own rank's entries, which are still empty: the others can move.
  gets found{wait->status, {}};
  found.bytes.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (wait->bytes[r]) found.bytes[r] = std::move(wait->bytes[r]);
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
  int seconds = static_cast<int>(std::max<long long>(1, (probe.count() + 999) / 1000));
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &seconds, PMIX_INT);
  const auto found = get_each(self_.nspace, key, others, world_size, &info, 1,
                              std::chrono::steady_clock::now() + probe + std::chrono::seconds(1));
  PMIX_INFO_DESTRUCT(&info);
  for (const int r : call.asked) {
    if (r >= 0 && r < world_size && found.status[static_cast<std::size_t>(r)] != PMIX_SUCCESS) call.absent.push_back(r);
  }
  return call;
}

std::vector<std::byte> pmix_session::get(int rank, const std::string& key) {
  pmix_proc_t proc;
  PMIX_LOAD_PROCID(&proc, self_.nspace, static_cast<pmix_rank_t>(rank));
  pmix_status_t status = PMIX_SUCCESS;
  const auto value = get_value(proc, key.c_str(), false, &status);
  if (!value) {
    throw error(errc::pmix, fmt::format("PMIx_Get({}) of rank {} failed: {}", key, rank, pmix_status_text(status)),
                status);
  }
  if (value->type != PMIX_BYTE_OBJECT) {
    throw error(errc::pmix, fmt::format("PMIx key {} of rank {} is not a byte object", key, rank));
  }
  const auto* begin = reinterpret_cast<const std::byte*>(value->data.bo.bytes);
  return {begin, begin + value->data.bo.size};
}

std::vector<std::vector<std::byte>> pmix_session::get_all(const std::string& key, int world_size,
                                                          std::chrono::milliseconds timeout) {
  // With the hash store every value is a request to the server: all of them in flight at once
  // took 45 ms on 1 node x 4 ranks (one after another: 1 to 9 ms).
  if (hash_store_) return rendezvous::get_all(key, world_size, timeout);
  std::vector<int> everyone(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) everyone[static_cast<std::size_t>(r)] = r;
  auto found =
      get_each(self_.nspace, key, everyone, world_size, nullptr, 0, std::chrono::steady_clock::now() + timeout);
  std::vector<int> late;
  for (int r = 0; r < world_size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (found.bytes[i]) continue;
    if (found.status[i] == PMIX_ERR_TIMEOUT) {
      late.push_back(r);
    } else if (found.status[i] == PMIX_SUCCESS) {
      throw error(errc::pmix, fmt::format("PMIx key {} of rank {} is not a byte object", key, r));
    } else {
      throw error(errc::pmix,
                  fmt::format("PMIx_Get({}) of rank {} failed: {}", key, r, pmix_status_text(found.status[i])),
                  found.status[i]);
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

pmix_facts pmix_session::query_facts() const {
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, self_.nspace, PMIX_RANK_WILDCARD);

  auto number = [&](const pmix_proc_t& proc, const char* key, const char* name) -> std::optional<int> {
    pmix_status_t status = PMIX_SUCCESS;
    auto value = get_value(proc, key, true, &status);
    if (!value) {
      if (status == PMIX_ERR_NOT_FOUND) return std::nullopt;
      throw error(errc::pmix, fmt::format("PMIx_Get({}) failed: {}", name, pmix_status_text(status)), status);
    }
    auto n = to_number(*value);
    if (!n) {
      throw error(errc::pmix,
                  fmt::format("PMIx key {} has the non-numeric type {}", name, PMIx_Data_type_string(value->type)));
    }
    return static_cast<int>(*n);
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
  // A process's own PMIX_NODEID is right under Slurm 22.05 (only other ranks' values are wrong).
  facts.node_rank = required(self_, PMIX_NODEID, "PMIX_NODEID");

  if (auto nodes = number(job, PMIX_NUM_NODES, "PMIX_NUM_NODES")) {
    facts.num_nodes = *nodes;
  } else {
    char* node_list = nullptr;
    pmix_status_t status = PMIx_Resolve_nodes(self_.nspace, &node_list);
    if (status != PMIX_SUCCESS || node_list == nullptr) {
      throw error(
          errc::pmix,
          fmt::format("the PMIx server provides neither PMIX_NUM_NODES nor a node list: {}", pmix_status_text(status)),
          status);
    }
    facts.num_nodes = 1 + static_cast<int>(std::count(node_list, node_list + std::strlen(node_list), ','));
    std::free(node_list);
  }

  pmix_status_t status = PMIX_SUCCESS;
  if (auto peers = get_value(job, PMIX_LOCAL_PEERS, true, &status); peers && peers->type == PMIX_STRING) {
    facts.local_peers = parse_rank_list(peers->data.string);
  }
  return facts;
}

}  // namespace jobkit::detail
