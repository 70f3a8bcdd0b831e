// The NCCL bootstrap under a real launcher, without a GPU. Modes:
//   ids PER_ROOT    share_unique_ids: every rank must hold the same ids, made by the right roots
//   die RANK        after a first barrier, RANK is killed (SIGKILL) as the exchange starts:
//                   nobody may hang
//   no-gpu          communicator creation on a machine without a GPU: a clean error on every rank
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "jobkit/jobkit.hpp"
#include "jobkit/nccl.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int arg = argc > 2 ? std::stoi(argv[2]) : 0;
  try {
    const auto& id = jobkit::current_identity();
    if (mode == "ids" || mode == "die") {
      if (mode == "die") {
        jobkit::barrier();
        if (id.rank == arg) ::kill(::getpid(), SIGKILL);
      }
      const auto ids = jobkit::nccl::share_unique_ids(mode == "ids" ? arg : 128);
      std::string bytes(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(ncclUniqueId));
      const auto everyone = jobkit::all_gather(bytes);
      bool same = true;
      for (const auto& other : everyone) same = same && other == bytes;
      std::uint64_t digest = 1469598103934665603ULL;
      for (const char c : bytes) digest = (digest ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
      std::printf("rank %d: %zu id(s), %s on every rank, digest %016llx\n", id.rank, ids.size(),
                  same ? "identical" : "DIFFERENT", static_cast<unsigned long long>(digest));
      return same ? 0 : 1;
    }
    if (mode == "no-gpu") {
      jobkit::nccl::communicator comm;
      std::printf("rank %d: a communicator without a GPU\n", id.rank);
      return 0;
    }
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const jobkit::error& e) {
    std::printf("rank error (%s): %s\n", std::string(jobkit::to_string(e.code())).c_str(), e.what());
    return 3;
  }
}
