// A stand-in for Slurm's libpmi2 (the functions jobkit calls), for test_pmi2_session: one rank,
// a key space in memory, and a fence whose behaviour FAKE_PMI2_FENCE chooses at each call:
// "ok" (the default) makes the puts visible, "fail" returns PMI2_ERR_OTHER, "block" never returns.
// FAKE_PMI2_MAPPING is the PMI_process_mapping served (unset: none).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {
std::mutex mutex;
std::map<std::string, std::string> pending, visible;
bool initialised = false;

int copy_out(const std::string& text, char* out, int size) {
  if (size <= 0) return 3;
  std::strncpy(out, text.c_str(), static_cast<std::size_t>(size) - 1);
  out[size - 1] = '\0';
  return 0;
}
}  // namespace

extern "C" {
int PMI2_Init(int* spawned, int* size, int* rank, int* appnum) {
  std::lock_guard lock(mutex);
  if (initialised) return 1;
  initialised = true;
  *spawned = 0;
  *size = 1;
  *rank = 0;
  *appnum = 0;
  return 0;
}
int PMI2_Finalize() {
  std::lock_guard lock(mutex);
  initialised = false;
  return 0;
}
int PMI2_Initialized() {
  std::lock_guard lock(mutex);
  return initialised ? 1 : 0;
}
int PMI2_Job_GetId(char jobid[], int size) { return copy_out("fake.0", jobid, size); }
int PMI2_Job_GetRank(int* rank) {
  *rank = 0;
  return 0;
}
int PMI2_Info_GetSize(int* size) {
  *size = 1;
  return 0;
}
int PMI2_KVS_Put(const char key[], const char value[]) {
  if (std::strlen(key) > 63 || std::strlen(value) > 1023) return 5;
  std::lock_guard lock(mutex);
  pending[key] = value;
  return 0;
}
int PMI2_KVS_Fence() {
  const char* mode = std::getenv("FAKE_PMI2_FENCE");
  const std::string how = mode ? mode : "ok";
  if (how == "block") {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (how == "fail") return 14;
  std::lock_guard lock(mutex);
  for (auto& [k, v] : pending) visible[k] = v;
  pending.clear();
  return 0;
}
int PMI2_KVS_Get(const char*, int, const char key[], char value[], int maxvalue, int* vallen) {
  std::lock_guard lock(mutex);
  const auto it = visible.find(key);
  if (it == visible.end()) return 14;
  *vallen = static_cast<int>(it->second.size());
  return copy_out(it->second, value, maxvalue);
}
int PMI2_Info_GetJobAttr(const char name[], char value[], int valuelen, int* found) {
  const char* mapping = std::getenv("FAKE_PMI2_MAPPING");
  *found = 0;
  if (std::strcmp(name, "PMI_process_mapping") != 0 || !mapping) return 0;
  *found = 1;
  return copy_out(mapping, value, valuelen);
}
}
