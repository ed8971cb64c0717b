// The training state copied in memory at a commit point: parameters, model
// buffers (batch norm's running statistics), optimizer state, RNG, outer optimizer state, the sync's own per-rank state
// (int8 residuals) and sampler position. Unlike
// SerializeTrainingState it copies tensors into buffers kept from the
// previous snapshot, so taking one at every commit point costs about a
// memcpy of the state (serialization cost ~20x more, measured on the mlp).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/models/model.h"
#include "worker/train/torch_compat.h"  // OptimizerStateKey
#include "worker/train/training_state.h"

namespace herd {

class StateSnapshot {
 public:
  // UNIMPLEMENTED for an optimizer whose state it cannot copy (sgd, adam and
  // adamw are supported).
  absl::Status Capture(Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
                       const std::vector<torch::Tensor>& outer_state,
                       const std::vector<torch::Tensor>& rank_state = {});
  // Writes the snapshot into an identically built model and optimizer.
  absl::Status Apply(Model* model, torch::optim::Optimizer* optimizer, TrainingPosition* position,
                     std::vector<torch::Tensor>* outer_state, std::vector<torch::Tensor>* rank_state = nullptr) const;
  bool empty() const { return params_.empty(); }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buffers_;
  // Per parameter (registration order); null where the optimizer has no state yet.
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> optimizer_;
  torch::Tensor rng_;
  std::vector<torch::Tensor> outer_;
  std::vector<torch::Tensor> rank_;
  TrainingPosition position_;
};

// What a trainer keeps across generations: its last commit.
struct CommittedState {
  int64_t generation = -1;  // the generation that committed it (or healed into it)
  int64_t step = -1;
  StateSnapshot snapshot;
};

}  // namespace herd
