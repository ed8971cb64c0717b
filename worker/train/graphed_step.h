// The captured path of a training step (cuda_graphs), between the trainer's
// step (training_step.h) and CapturedStep (cuda_step_graph.h): the batch
// copied from the prefetcher's pinned memory into the graph's static inputs
// (one async copy per tensor), the learning rate as a float32 scalar on the
// device that the fused optimizer reads (a schedule needs no re-capture),
// the step's outputs as tensors every replay rewrites, and the optimizer's
// host-side step counts, which a replay does not run the code to advance.
// Nothing here reads the host: the caller accounts the outputs on the
// device, and they are read at the commit point as in an eager step.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
#include "worker/train/step/cuda_step_graph.h"
#include "worker/train/optim/optimizer_step_counts.h"

namespace herd {

// What one captured step leaves on the device.
struct GraphedOutputs {
  torch::Tensor loss;       // the step's loss, detached
  torch::Tensor grad_norm;  // the norm before clipping where grad_clip_norm is set, else undefined
};

// One training step on `batch` (the static inputs, on the device) whose
// optimizer reads the learning rate from `lr`. It must not read the host;
// it throws to fail the capture.
using GraphedBody = std::function<GraphedOutputs(const Batch& batch, const torch::Tensor& lr)>;

class GraphedStep {
 public:
  // UNAVAILABLE where CUDA graphs are (MakeCapturedStep). `params`: the
  // model's parameters, whose gradients the graph owns once captured.
  static absl::StatusOr<std::unique_ptr<GraphedStep>> Create(const torch::Device& device,
                                                             std::vector<torch::Tensor> params);

  // Captures `body` for the shapes of `host_batch` (a previous graph is
  // dropped) and runs the step once by replaying it. The fused optimizer's
  // device counts must be caught up first (FusedOptimizerStep::CatchUp). On an error nothing of
  // the step has run: the host's step counts are put back, and the
  // FAILED_PRECONDITION names what could not be captured.
  absl::Status Capture(const Batch& host_batch, double lr, torch::optim::Optimizer& optimizer,
                       const GraphedBody& body);
  // The captured step on `host_batch` (the shapes it was captured with) at
  // learning rate `lr`.
  absl::Status Replay(const Batch& host_batch, double lr, torch::optim::Optimizer& optimizer);

  bool captured() const { return captured_->captured(); }
  const GraphedOutputs& outputs() const { return outputs_; }

 private:
  GraphedStep(std::unique_ptr<CapturedStep> captured, torch::Tensor lr, std::vector<torch::Tensor> params);

  std::unique_ptr<CapturedStep> captured_;
  torch::Tensor lr_;  // float32 scalar on the device
  std::vector<torch::Tensor> params_;
  // The gradients the graph writes and its optimizer reads. Held while the
  // graph lives: an eager step in between (an epoch's short last batch)
  // gives the parameters fresh gradients, and the graph keeps these.
  std::vector<torch::Tensor> grads_;
  std::vector<OptimizerStateKeyType> counted_;  // the step counts one step advances
  GraphedOutputs outputs_;
};

}  // namespace herd
