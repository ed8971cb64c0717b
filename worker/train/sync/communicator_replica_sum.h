// The trainer's side of the model's ReplicaSum seam (worker/models/
// replica_sum.h): sums over the generation's data communicator, the one
// gradients use. Its collectives queue in issue order with the gradient
// buckets; every rank runs the same forward and backward, so every rank
// issues them in the same order. A failure is kept (later sums are skipped)
// and reported by status() after the step, the way a failed bucket is.
#pragma once

#include <mutex>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"
#include "worker/models/replica_sum.h"

namespace herd {

class CommunicatorReplicaSum : public ReplicaSum {
 public:
  // `compute_mutex` (TrainerOptions, null in a real trainer): the trainer
  // holds it around forward and backward, so Sum releases it while waiting
  // for the other ranks, which need it to reach the same sum.
  CommunicatorReplicaSum(Communicator* comm, std::mutex* compute_mutex) : comm_(comm), compute_mutex_(compute_mutex) {}
  void Sum(torch::Tensor& values) override;
  // OK, or the first failed sum's error (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED).
  const absl::Status& status() const { return status_; }

 private:
  Communicator* comm_;
  std::mutex* compute_mutex_;
  absl::Status status_;
};

}  // namespace herd
