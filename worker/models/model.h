// A trainable model as the trainer sees it: parameters in a fixed order (the
// order gradients are bucketed and checkpoints are written in) and a forward
// pass that returns the loss.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/data/dataset.h"
#include "worker/models/replica_sum.h"

namespace herd {

struct ModelOutput {
  torch::Tensor loss;    // scalar
  torch::Tensor logits;  // [N, C] or [N, T, C]; undefined for TorchScript models that return their loss
};

class Model {
 public:
  virtual ~Model();
  // Registration order; the same on every rank.
  virtual std::vector<torch::Tensor> Parameters() = 0;
  virtual std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() = 0;
  // State that is not trained by gradients but is part of the model (batch
  // norm's running statistics), registration order; empty for most models.
  // Commits, checkpoints and healing carry it with the parameters.
  virtual std::vector<std::pair<std::string, torch::Tensor>> NamedBuffers() { return {}; }
  std::vector<torch::Tensor> Buffers();
  // The generation's cross-rank sum (null: none). True when the model uses
  // it: then Forward in training mode is a collective, which every rank must
  // run for every micro-batch, even on an empty batch. The trainer sets it
  // per generation and clears it before the communicators go.
  virtual bool SetReplicaSum(ReplicaSum* /*sum*/) { return false; }
  // loss = mean cross-entropy of logits vs targets (per token for sequences)
  // unless the model computes its own. An empty batch gives loss 0 (not
  // NaN) with a graph, so backward yields zero gradients. The batch is moved
  // to the model's device. LibTorch errors throw c10::Error.
  virtual ModelOutput Forward(const Batch& batch) = 0;
  virtual void SetTraining(bool training) = 0;
  virtual void To(const torch::Device& device) = 0;
  virtual std::string name() const = 0;
  // The sizes the model was built with, defaults resolved, as a JSON object
  // ({"heads": 4, ...}): what rebuilding it elsewhere (its PyTorch twin)
  // needs beyond the tensors' names and shapes. "{}" when nothing is needed.
  virtual std::string Config() const { return "{}"; }
};

struct ModelInputInfo {
  std::vector<int64_t> sample_shape;  // Dataset::sample_shape()
  int64_t num_classes = 0;            // Dataset::num_classes(): classes, or vocabulary for text
};

// Built-ins: mlp, mnist_cnn, resnet_small, char_transformer (see their .cc
// files), or torchscript (spec.path; code that runs with the worker's
// rights). Built-in parameters are initialized from `seed` alone, so every
// rank builds bitwise-identical replicas. INVALID_ARGUMENT names the field
// at fault (model.name, model.path) or the input shape a model cannot take.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const v1::ModelSpec& spec, const ModelInputInfo& info,
                                                   uint64_t seed);

}  // namespace herd
