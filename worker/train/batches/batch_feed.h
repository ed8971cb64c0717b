// A generation's batches on one rank: each step's micro-batches from the
// position and the ranks' shares (sampler.h, batch_shares.h), gathered onto
// the model's device (prefetched while the previous step computes, where
// the context prefetches), recorded in the sample ledger, and the shares
// re-planned from the ranks' rates at commit points (sync.shares:
// throughput). Every generation starts from equal shares: its members'
// rates are not known yet, and a fixed start keeps equal shares
// reproducible.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "worker/data/dataset.h"
#include "worker/train/batches/batch_prefetcher.h"
#include "worker/train/batches/batch_shares.h"
#include "worker/train/batches/sample_ledger.h"
#include "worker/train/batches/sampler.h"
#include "worker/train/step/training_position.h"
#include "worker/train/report/straggler.h"
#include "worker/train/report/trainer_metrics.h"

namespace herd {

struct BatchFeedOptions {
  const Dataset* train = nullptr;
  const EpochSampler* sampler = nullptr;
  BatchPrefetcher* prefetcher = nullptr;  // null: gathered in the step
  SampleLedger* ledger = nullptr;         // may be null
  TrainerMetrics* metrics = nullptr;      // may be null
  torch::Device device = torch::kCPU;
  int rank = 0;
  int world_size = 1;
  int64_t generation = 0;
  int64_t samples_per_step = 0;  // over all ranks
  int64_t micro_batch = 0;       // batch_size: the largest micro-batch
  int64_t max_steps = 0;
  int64_t epochs = 0;
  // The model's training forward is a collective: ranks with no rows still run it.
  bool collective_forward = false;
  bool throughput_shares = false;
  // With islands and global_batch_size: each rank's island (IslandShares);
  // empty: equal shares over all ranks.
  std::vector<int> island_of;
};

class BatchFeed {
 public:
  explicit BatchFeed(BatchFeedOptions options);

  // This rank's micro-batches of the step after `pos`.
  StepPlan Plan(const TrainingPosition& pos) const;
  // The step's sample ids into the ledger, where one is kept.
  void Record(const TrainingPosition& pos, const StepPlan& plan) const;
  // The micro-batch at `indices`, on the model's device.
  Batch Take(const std::vector<int64_t>& indices);
  // Queues the batches of the step after `pos` advanced by `step_samples`
  // with the prefetcher; a commit point that changes the plan makes them a miss.
  void PrefetchNext(const TrainingPosition& pos, int64_t step_samples);
  // Whether a micro-batch with these indices runs a forward.
  bool Runs(const std::vector<int64_t>& indices) const { return !indices.empty() || options_.collective_forward; }

  // Samples of each rank per step this generation.
  const std::vector<int64_t>& shares() const { return shares_; }
  // At a commit point (sync.shares: throughput): new shares from the
  // interval's step times, the same on every rank.
  void Replan(const std::vector<RankStepTimes>& times, int64_t step);

 private:
  const BatchFeedOptions options_;
  std::vector<int64_t> shares_;
  // What the last commit point's plan carries to the next.
  ShareHistory share_history_;
};

}  // namespace herd
