#include "worker/train/batches/batch_feed.h"

#include <glog/logging.h>

#include "absl/strings/str_join.h"

namespace herd {

BatchFeed::BatchFeed(BatchFeedOptions options)
    : options_(std::move(options)),
      shares_(options_.island_of.empty() ? EqualShares(options_.samples_per_step, options_.world_size)
                                         : IslandShares(options_.samples_per_step, options_.island_of)) {
  if (options_.metrics != nullptr) options_.metrics->SetBatchShare(shares_[options_.rank]);
}

StepPlan BatchFeed::Plan(const TrainingPosition& pos) const {
  // Micro-batches of at most batch_size: grad_accumulation of them with
  // equal shares, as many as its share needs with throughput shares or
  // global_batch_size.
  return options_.sampler->PlanStep(pos.epoch, pos.samples_in_epoch, shares_, options_.rank, options_.micro_batch);
}

void BatchFeed::Record(const TrainingPosition& pos, const StepPlan& plan) const {
  if (options_.ledger == nullptr) return;
  std::vector<int64_t> ids;
  for (const auto& micro : plan.micro_batches) ids.insert(ids.end(), micro.begin(), micro.end());
  options_.ledger->Step(options_.generation, pos.step, pos.epoch, ids);
}

Batch BatchFeed::Take(const std::vector<int64_t>& indices) {
  Batch batch = options_.prefetcher != nullptr ? options_.prefetcher->Take(indices) : options_.train->Get(indices);
  if (options_.device.is_cuda()) {
    // Pinned host memory (the prefetcher's already is) lets the copy run
    // asynchronously to the GPU, on the step's stream.
    batch.inputs = batch.inputs.pin_memory().to(options_.device, /*non_blocking=*/true);
    batch.targets = batch.targets.pin_memory().to(options_.device, /*non_blocking=*/true);
  }
  return batch;
}

void BatchFeed::PrefetchNext(const TrainingPosition& pos, int64_t step_samples) {
  if (options_.prefetcher == nullptr) return;
  // Where this step leaves training (the step advances by the same rule).
  const TrainingPosition after = AdvancedByStep(pos, step_samples, options_.train->size());
  if (DoneAt(after, options_.max_steps, options_.epochs)) return;
  StepPlan next = Plan(after);
  // Only what the step will take.
  std::vector<std::vector<int64_t>> taken;
  for (auto& micro : next.micro_batches) {
    if (Runs(micro)) taken.push_back(std::move(micro));
  }
  options_.prefetcher->Prefetch(taken);
}

void BatchFeed::Replan(const std::vector<RankStepTimes>& times, int64_t step) {
  if (!options_.throughput_shares) return;
  SharePlan plan = PlanThroughputShares(shares_, times, share_history_);
  share_history_ = std::move(plan.history);
  if (!plan.shares.has_value()) return;
  if (options_.rank == 0) {
    LOG(INFO) << "step " << step << ": batch shares re-planned from the ranks' rates: [" << absl::StrJoin(shares_, ", ")
              << "] -> [" << absl::StrJoin(*plan.shares, ", ") << "] samples per step";
  }
  shares_ = std::move(*plan.shares);
  if (options_.metrics != nullptr) options_.metrics->SetBatchShare(shares_[options_.rank]);
}

}  // namespace herd
