// The one way the trainer copies device values to the host. On CUDA each
// such read waits for every kernel queued before it, so the step loop must
// not read: values a report needs (the loss sum, a non-finite flag)
// accumulate in device tensors and are read here at log and commit points,
// all of them in one copy. Counting the reads lets a CPU test pin that
// (host_reads_test); a source check keeps `.item` out of the step's files.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace herd {

class HostReads {
 public:
  // The values of the given one-element tensors, in order, as doubles: one
  // copy to the host (one synchronization) for all of them.
  std::vector<double> Read(const std::vector<torch::Tensor>& scalars);
  // Read() of one.
  double Read(const torch::Tensor& scalar);

  // Read() calls so far.
  int64_t count() const { return count_.load(); }

 private:
  std::atomic<int64_t> count_{0};
};

}  // namespace herd
