// The training state copied in memory at a commit point: parameters, model
// buffers (batch norm's running statistics), optimizer state, RNG, outer optimizer state, the sync's own per-rank state
// (int8 residuals) and sampler position. Unlike
// SerializeTrainingState it copies tensors into buffers kept from the
// previous snapshot, so taking one at every commit point costs about a
// memcpy of the state (serialization cost ~20x more, measured on the mlp).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/models/model.h"
#include "worker/train/step/torch_compat.h"  // OptimizerStateKey
#include "worker/train/checkpoint/training_state.h"

namespace herd {

class StateSnapshot {
 public:
  // `on_host`: copies go to host memory whatever the model's device (pinned
  // buffers and one device sync for CUDA tensors): for a checkpoint written
  // from the copy off the step loop (checkpoint_writer.h), and for a CUDA
  // trainer's commit (CommittedState). Else each copy stays on its tensor's
  // device. Apply puts everything back on the model's device either way.
  explicit StateSnapshot(bool on_host = false) : on_host_(on_host) {}

  // UNIMPLEMENTED for an optimizer whose state it cannot copy (sgd, adam and
  // adamw are supported).
  absl::Status Capture(Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
                       const std::vector<torch::Tensor>& outer_state,
                       const std::vector<torch::Tensor>& rank_state = {});
  // Writes the snapshot into an identically built model and optimizer.
  absl::Status Apply(Model* model, torch::optim::Optimizer* optimizer, TrainingPosition* position,
                     std::vector<torch::Tensor>* outer_state, std::vector<torch::Tensor>* rank_state = nullptr) const;
  bool empty() const { return params_.empty(); }
  const TrainingPosition& position() const { return position_; }

  // The files SerializeTrainingState would write for the captured state
  // (host snapshots only; safe on another thread while the model trains on).
  // `make_optimizer` builds an optimizer like the captured one over the
  // given tensors: it lends torch's own format to the copied state.
  using OptimizerFactory =
      std::function<absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>>(std::vector<torch::Tensor>)>;
  absl::StatusOr<std::map<std::string, std::string>> Serialize(const OptimizerFactory& make_optimizer) const;

 private:
  bool on_host_ = false;
  // Host snapshots: the model's parameter and buffer names, for Serialize.
  std::vector<std::string> param_names_;
  std::vector<std::string> buffer_names_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buffers_;
  // Per parameter (registration order); null where the optimizer has no state yet.
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> optimizer_;
  torch::Tensor rng_;
  std::vector<torch::Tensor> outer_;
  std::vector<torch::Tensor> rank_;
  TrainingPosition position_;
};

// What a trainer keeps across generations: its last commit. A CUDA
// trainer keeps it in pinned host memory (TrainingContext::Create): a second
// copy of parameters and optimizer state on the GPU would cost the memory
// a model needs (eager PyTorch keeps none), while the copy out costs one DMA
// per commit point, where the step loop reads the loss anyway.
struct CommittedState {
  int64_t generation = -1;  // the generation that committed it (or healed into it)
  int64_t step = -1;
  StateSnapshot snapshot;
};

}  // namespace herd
