// The training state as bytes: parameters and model buffers (model.pt, by
// name, as a state dict holds them), optimizer state, sampler position, RNG. Rank 0 writes it to checkpoints; the same bytes can be broadcast to
// heal a joining rank.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/models/model.h"
#include "worker/train/step/training_position.h"

namespace herd {

// File name -> contents, ready for WriteCheckpointFolder. `outer_state` is
// the parameter-averaging outer optimizer's state (empty when none).
absl::StatusOr<std::map<std::string, std::string>> SerializeTrainingState(
    Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
    const std::vector<torch::Tensor>& outer_state = {});

// The same files from their parts, for state copied off the live model
// (StateSnapshot::Serialize): `tensors` are the parameters then the buffers
// by name, `optimizer` holds the optimizer state over them, `rng` is the CPU
// generator's state.
struct TrainingStateParts {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  torch::optim::Optimizer* optimizer = nullptr;
  torch::Tensor rng;
  TrainingPosition position;
  std::vector<torch::Tensor> outer_state;
};
absl::StatusOr<std::map<std::string, std::string>> SerializeTrainingParts(const TrainingStateParts& parts);

// Loads state written by SerializeTrainingState into an identically built
// model and optimizer. INVALID_ARGUMENT when the state does not fit them.
// `outer_state`, when given, receives the saved outer optimizer state (left
// empty if the state has none).
absl::Status RestoreTrainingState(const std::map<std::string, std::string>& files, Model* model,
                                  torch::optim::Optimizer* optimizer, TrainingPosition* position,
                                  std::vector<torch::Tensor>* outer_state = nullptr);

}  // namespace herd
