// What the launcher's PMIx server serves: one line per key per rank, for launchers.sh and
// launcher_table.py. Talks to PMIx directly (not through jobkit), so that it shows what jobkit
// reads before jobkit interprets it:
//   pmix-key rank=R of=WHO key=KEY type=TYPE value=VALUE      (or status=STATUS for a failed get)
// With a directory argument, each rank writes its lines to DIR/rank-R.keys instead (launchers
// relay ranks' output in pieces that may interleave).
// WHO is "self", "job" (PMIX_RANK_WILDCARD), "next" (rank R+1 mod size), or "node:HOST" (node-level
// data: PMIX_NODE_INFO with PMIX_HOSTNAME=HOST, for each host of PMIx_Resolve_nodes).
#include <pmix.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string value_text(const pmix_value_t& v) {
  char buffer[64];
  switch (v.type) {
    case PMIX_STRING: return v.data.string ? v.data.string : "(null)";
    case PMIX_BYTE_OBJECT: return std::string(v.data.bo.bytes, v.data.bo.size);
    case PMIX_BOOL: return v.data.flag ? "true" : "false";
    case PMIX_UINT8: std::snprintf(buffer, sizeof buffer, "%u", unsigned{v.data.uint8}); break;
    case PMIX_UINT16: std::snprintf(buffer, sizeof buffer, "%u", unsigned{v.data.uint16}); break;
    case PMIX_UINT32: std::snprintf(buffer, sizeof buffer, "%" PRIu32, v.data.uint32); break;
    case PMIX_UINT64: std::snprintf(buffer, sizeof buffer, "%" PRIu64, v.data.uint64); break;
    case PMIX_INT: std::snprintf(buffer, sizeof buffer, "%d", v.data.integer); break;
    case PMIX_INT32: std::snprintf(buffer, sizeof buffer, "%" PRId32, v.data.int32); break;
    case PMIX_UINT: std::snprintf(buffer, sizeof buffer, "%u", v.data.uint); break;
    case PMIX_PROC_RANK: std::snprintf(buffer, sizeof buffer, "%u", v.data.rank); break;
    case PMIX_SIZE: std::snprintf(buffer, sizeof buffer, "%zu", v.data.size); break;
    default: return "(not shown)";
  }
  return buffer;
}

/// PMIx_Get with PMIX_OPTIONAL, as jobkit asks: only what the server already handed this client.
/// (Without it, a job-level key the server lacks becomes a request for rank -1 that Slurm 22.05
/// answers by killing the step.)
/// A key as its macro's name (what the docs and jobkit's messages call it) and its value.
struct key_name {
  const char* name;
  const char* key;
};
#define KEY(k) \
  key_name { #k, k }

void print(const pmix_proc_t& self, const std::string& of, key_name key, const pmix_info_t* qualifiers,
           std::size_t nqualifiers, const pmix_proc_t& proc, std::string* text = nullptr) {
  std::vector<pmix_info_t> info(nqualifiers + 1);
  bool optional = true;
  for (std::size_t i = 0; i < nqualifiers; ++i) PMIX_INFO_XFER(&info[i], &qualifiers[i]);
  PMIX_INFO_LOAD(&info[nqualifiers], PMIX_OPTIONAL, &optional, PMIX_BOOL);
  pmix_value_t* value = nullptr;
  const pmix_status_t status = PMIx_Get(&proc, key.key, info.data(), info.size(), &value);
  for (auto& i : info) PMIX_INFO_DESTRUCT(&i);
  if (status != PMIX_SUCCESS || value == nullptr) {
    std::printf("pmix-key rank=%u of=%s key=%s status=%s\n", self.rank, of.c_str(), key.name,
                PMIx_Error_string(status));
    return;
  }
  const std::string shown = value_text(*value);
  if (text) *text = shown;
  std::printf("pmix-key rank=%u of=%s key=%s type=%s value=%s\n", self.rank, of.c_str(), key.name,
              PMIx_Data_type_string(value->type), shown.c_str());
  PMIX_VALUE_RELEASE(value);
}

}  // namespace

int main(int argc, char** argv) {
  pmix_proc_t self;
  if (const pmix_status_t status = PMIx_Init(&self, nullptr, 0); status != PMIX_SUCCESS) {
    std::fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(status));
    return 1;
  }
  if (argc > 1) {
    const std::string path = std::string(argv[1]) + "/rank-" + std::to_string(self.rank) + ".keys";
    if (std::freopen(path.c_str(), "w", stdout) == nullptr) {
      std::perror(path.c_str());
      return 1;
    }
  }
  pmix_proc_t job, next;
  PMIX_LOAD_PROCID(&job, self.nspace, PMIX_RANK_WILDCARD);
  std::string size_text = "1";
  print(self, "job", KEY(PMIX_JOB_SIZE), nullptr, 0, job, &size_text);
  const auto size = static_cast<pmix_rank_t>(std::strtoul(size_text.c_str(), nullptr, 10));
  PMIX_LOAD_PROCID(&next, self.nspace, size > 0 ? (self.rank + 1) % size : self.rank);

  for (const auto key :
       {KEY(PMIX_LOCAL_SIZE), KEY(PMIX_NUM_NODES), KEY(PMIX_LOCAL_PEERS), KEY(PMIX_NODEID), KEY(PMIX_APPNUM)}) {
    print(self, "job", key, nullptr, 0, job);
  }
  for (const auto key : {KEY(PMIX_LOCAL_RANK), KEY(PMIX_NODEID), KEY(PMIX_NODE_RANK), KEY(PMIX_LOCAL_SIZE),
                         KEY(PMIX_APPNUM), KEY(PMIX_APP_RANK), KEY(PMIX_HOSTNAME)}) {
    print(self, "self", key, nullptr, 0, self);
  }
  for (const auto key : {KEY(PMIX_NODEID), KEY(PMIX_HOSTNAME)}) print(self, "next", key, nullptr, 0, next);

  char* nodes = nullptr;
  const pmix_status_t status = PMIx_Resolve_nodes(self.nspace, &nodes);
  std::printf("pmix-key rank=%u of=job key=PMIx_Resolve_nodes %s%s\n", self.rank,
              status == PMIX_SUCCESS ? "type=PMIX_STRING value=" : "status=",
              status == PMIX_SUCCESS ? (nodes ? nodes : "") : PMIx_Error_string(status));
  std::vector<std::string> hosts;
  for (const char* p = nodes; p && *p;) {
    const char* comma = std::strchr(p, ',');
    hosts.emplace_back(p, comma ? static_cast<std::size_t>(comma - p) : std::strlen(p));
    p = comma ? comma + 1 : p + std::strlen(p);
  }
  std::free(nodes);
  // Node-level data of each of the job's nodes, by hostname (PMIx 4 node-info qualifiers).
  for (const auto& host : hosts) {
    pmix_info_t info[2];
    bool yes = true;
    PMIX_INFO_LOAD(&info[0], PMIX_NODE_INFO, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_HOSTNAME, const_cast<char*>(host.c_str()), PMIX_STRING);
    print(self, "node:" + host, KEY(PMIX_NODEID), info, 2, job);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
  }
  std::fflush(stdout);
  PMIx_Finalize(nullptr, 0);
  return 0;
}
