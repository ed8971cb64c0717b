// on_nonfinite: fail (the default) without a host read per step. Every
// micro-batch's loss (and the gradient norm, where clipping computes it)
// is checked on the device, and the first non-finite one is kept there
// with its step; the trainer reads it with the progress window at the next
// commit point and fails the job naming that step and value. The steps
// between it and the commit point are trained in vain, but the job fails
// anyway and never reports a non-finite value.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace herd {

enum class NonFinitePolicy { kFail, kSkipStep };

class NonFiniteWatch {
 public:
  enum Kind { kLoss = 0, kGradientNorm = 1 };

  // Nothing seen yet, on `device`.
  void Reset(const torch::Device& device);
  // Keeps `value` (a scalar tensor on the device) as the first non-finite
  // one, with `step`, unless one was kept already. Device operations only.
  void Observe(const torch::Tensor& value, int64_t step, Kind kind);

  // What to read at a commit point, in one HostReads::Read with the rest.
  std::vector<torch::Tensor> Tensors() const { return {step_, value_, kind_}; }
  // From those three values as read: OK when nothing was kept, else
  // INVALID_ARGUMENT naming the step and the value (the job fails: another
  // generation would diverge the same way).
  static absl::Status Verdict(double step, double value, double kind);

 private:
  torch::Tensor step_;   // float64; -1 while nothing was kept
  torch::Tensor value_;  // float64
  torch::Tensor kind_;   // float64: Kind
};

}  // namespace herd
