// The one bucketing rule and the one wire-format parser that gradient
// all-reduce (gradient_sync.h) and parameter averaging
// (parameter_averaging.h) share, so the same sync.* settings mean the same
// messages in both modes.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

struct BucketSlot {
  int bucket = -1;  // -1: the parameter is in no bucket
  int64_t offset = 0;
  int64_t numel = 0;
};

struct BucketLayout {
  std::vector<std::vector<int>> buckets;  // parameter indices, in filling order
  std::vector<int64_t> elements;          // per bucket
  std::vector<BucketSlot> slots;          // per parameter index
};

// Parameters in reverse registration order (about the order backward
// finishes their gradients). As DDP does, a bucket closes once it reaches its
// cap (first_bucket_mib for the first, bucket_cap_mib after), so the
// parameter that crosses the cap still leaves with it: a small first bucket
// then holds the last layer and goes out early in backward. With
// `only_requiring_grad`, parameters without gradients are left out.
BucketLayout PlanBuckets(const std::vector<torch::Tensor>& params, double first_bucket_mib, double bucket_cap_mib,
                         bool only_requiring_grad);

torch::ScalarType TorchType(DataType type);

}  // namespace herd
