// Held-out evaluation, sharded across ranks: rank r scores samples r, r+W,
// ... and the sums are all-reduced, so every rank gets the same metrics.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/data/dataset.h"
#include "worker/models/model.h"

namespace herd {

struct EvalOptions {
  int64_t max_samples = 0;  // 0: the whole set
  int64_t batch_size = 256;
  std::mutex* compute_mutex = nullptr;  // held around forward (see TrainerOptions)
};

// {"loss": mean loss, "accuracy": fraction correct (per token for sequences)}.
absl::StatusOr<std::map<std::string, double>> Evaluate(Model* model, const Dataset& dataset, Communicator* comm,
                                                       const EvalOptions& options);

}  // namespace herd
