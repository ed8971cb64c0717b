// Bucketed, overlapped gradient all-reduce (DDP-style) over a Communicator.
//
// Parameters are grouped into buckets in reverse registration order (the
// order backward produces their gradients): a bucket closes as soon as it
// holds at least `first_bucket_mib` (the first) or `bucket_cap_mib` (the
// others), as in DDP. A gradient hook copies
// each gradient into its bucket's flat buffer as autograd produces it; when a
// bucket is complete its all-reduce is launched at once, so communication
// overlaps the rest of backward. Buckets launch strictly in index order so
// every rank issues the same collective sequence.
//
// With one rank nothing is bucketed or sent: .grad already is the sum.
// With `reduce_scatter` (sync.shard_optimizer, ZeRO-1) each bucket is
// reduce-scattered in place instead (Communicator::ReduceScatterInPlaceAsync),
// from the same hooks in the same order: after Finish() each rank holds the
// global sum only in its own ranges of every bucket (ScatteredPieces), half
// an all-reduce's traffic. The other elements of the .grad views hold
// partial sums and must not be used: the sharded optimizer steps, clips and
// measures only its own pieces.
//
// The all-reduce is a SUM: the trainer scales each rank's loss by
// local_samples / global_samples, so the sum is the global-batch mean even
// when ranks hold different numbers of samples (the last step of an epoch).
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"
#include "worker/train/optim/shard_piece.h"

namespace herd {

struct GradientSyncOptions {
  double first_bucket_mib = 1;
  double bucket_cap_mib = 25;
  DataType wire_type = DataType::kFloat32;  // sync.compression
  bool reduce_scatter = false;              // sync.shard_optimizer: see above
};

// What one synchronized step did; the overlap proof reads these.
struct GradientSyncStats {
  int buckets = 0;
  int launched_during_backward = 0;  // launched from hooks, before Finish()
  double first_launch_seconds = -1;  // since ArmForBackward()
  double backward_seconds = 0;       // ArmForBackward() .. Finish()
  double exposed_wait_seconds = 0;   // blocked in Finish() waiting for the network
  // Bytes this rank put through the collectives: a bucket all-reduced counts
  // its size, a bucket reduce-scattered half of it (half the traffic).
  int64_t wire_bytes = 0;
};

class GradientSync {
 public:
  GradientSync(std::vector<torch::Tensor> params, Communicator* comm, GradientSyncOptions options);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // The next backward pass launches buckets from its gradient hooks. Call
  // before the backward of a step's last micro-batch only; earlier
  // micro-batches accumulate locally.
  void ArmForBackward();

  // Launches the buckets backward did not complete (unused parameters, or a
  // rank with an empty batch, contribute zeros or their accumulated gradient),
  // waits for all, and makes each parameter's .grad the synchronized sum.
  absl::Status Finish();

  const GradientSyncStats& last_stats() const { return stats_; }
  std::vector<int64_t> bucket_elements() const;
  // Buckets the communicator sums where they lie (AllocateAllReduceBuffer).
  int in_place_buckets() const { return in_place_buckets_; }
  bool reduce_scatter() const { return options_.reduce_scatter; }
  // Reduce-scatter mode: every rank's pieces of the parameters, whose summed
  // gradients that rank receives (the communicator's layout of each bucket
  // cut at parameter boundaries), in bucket order; `flat` counts elements
  // over the buckets in order. Parameters without gradient have none.
  // Empty in all-reduce mode.
  const std::vector<ShardPiece>& scattered_pieces() const { return pieces_; }

 private:
  struct Slot {
    int bucket;
    int64_t offset;
    int64_t numel;
  };
  struct Bucket {
    torch::Tensor flat;  // float32 sums, one slice per parameter
    torch::Tensor wire;  // compressed copy sent on the wire (if compressing)
    int64_t elements = 0;
    std::vector<int> params;
    int pending = 0;
    bool ready = false;
    std::shared_ptr<Work> work;
  };

  torch::Tensor BucketBuffer(int64_t elements, const torch::TensorOptions& options);
  void PlanPieces();
  void OnGradient(int param_index, const torch::Tensor& grad);
  void FillSlot(int param_index, const torch::Tensor* incoming);
  void LaunchReadyBucketsLocked();
  void Launch(Bucket& bucket);
  double SecondsSinceArm() const;

  std::vector<torch::Tensor> params_;
  Communicator* comm_;
  GradientSyncOptions options_;
  DataType wire_type_ = DataType::kFloat32;
  // One rank: the sum is the rank's own gradient, so nothing is copied into
  // buckets or sent (a copy of every gradient per step, 4.5% of a
  // compute-bound step's time in bench/profile_trainer.py).
  bool alone_ = false;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hook_handles_;
  std::vector<bool> filled_;
  int in_place_buckets_ = 0;
  std::vector<ShardPiece> pieces_;  // reduce-scatter mode only

  std::mutex mu_;  // hooks may run on autograd worker threads
  bool armed_ = false;
  size_t next_launch_ = 0;
  std::chrono::steady_clock::time_point armed_at_;
  GradientSyncStats stats_;
};

}  // namespace herd
