// TorchScript model files the tests submit as `model: {name: torchscript}`.
// No LibTorch in this header (see final_model.h for why).
#pragma once

#include <string>

namespace herd::testing {

// Writes, under `dir`, a TorchScript model whose forward(x, y) returns its
// loss for 16 features and 4 classes, and an infinite loss on its third
// call (in training, step 3's only micro-batch on every rank; evaluation
// runs only after the last step). With trainable false its one parameter
// does not require grad, so it has nothing to train. Returns the path.
std::string WriteBadThirdBatchModel(const std::string& dir, bool trainable = true);

// Writes, under `dir`, a TorchScript model whose forward(x) returns logits
// of 3 classes for 16 features. Returns the path.
std::string WriteThreeClassModel(const std::string& dir);

// Writes, under `dir`, a TorchScript model whose forward(x) raises
// (a failed assert with `message`) on every call. Returns the path.
std::string WriteRaisingModel(const std::string& dir, const std::string& message);

}  // namespace herd::testing
