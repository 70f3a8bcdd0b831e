// Built only through jobkit::nccl: <jobkit/nccl.hpp> needs the CUDA and NCCL headers, and the
// program calls NCCL itself as well as jobkit's NCCL part. Needs no GPU.
#include <jobkit/jobkit.hpp>
#include <jobkit/nccl.hpp>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 2;
  // One visible device: the rule picks it, whatever the local rank.
  const int device = jobkit::nccl::select_device(1, 0, 1);
  fmt::print("nccl {} device {}\n", version, device);
  return device == 0 ? 0 : 3;
}
