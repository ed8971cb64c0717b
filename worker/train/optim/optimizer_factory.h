// Builds the job's optimizer and applies per-step learning rates.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd {

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const v1::OptimizerSpec& spec,
                                                                      std::vector<torch::Tensor> params);

void SetLearningRate(torch::optim::Optimizer* optimizer, double lr);

}  // namespace herd
