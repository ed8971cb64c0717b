// Rounds across islands (sync.islands_by), behind mode average's strategy.
//
// Inside an island, every step's gradients are all-reduced over the island
// (the strategy's island GradientSync), so its replicas stay bitwise
// identical. Across islands, the parameters are cut into shards of whole
// tensors (AssignShards, balanced by bytes); position p of every island
// runs ParameterAveraging on shard p over its cross group (fragments, int8,
// outer nesterov, overlap_steps as in plain averaging), so every cross-site
// link carries 1/m of a round at once and no rank carries the whole model.
// After each merge, each shard's owner broadcasts its shard to its island.
// Ranks at positions >= m (larger islands only) own no shard: they keep the
// same schedule, receive every shard and send nothing across islands.
//
// The outer optimizer's state lives with the shard owners; GatherOuterState
// (before every commit) broadcasts each owner's part through the island, so
// every rank holds all of it, laid out one tensor per parameter: checkpoints
// and heals then carry it whole, whatever the islands' sizes are when it is
// restored. The int8 residuals stay with their rank (as in plain averaging),
// tagged with their shard, and are zeroed when the rank's shard changed.
//
// A round's side payload (overlap_steps auto's measurements) is all-gathered
// by each cross group only. So that every rank of every island decides the
// same tau, the island then all-gathers what its shard owners gathered:
// last_round().side_payloads holds the rows of every owner of every island
// (owner by owner, each owner's cross group in island order), the same
// everywhere. Ranks that own no shard send nothing across islands and
// measure no round: their rows are left out.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/train/sync/averaging_rounds.h"
#include "worker/train/sync/island_layout.h"
#include "worker/train/sync/parameter_averaging.h"

namespace herd {

class IslandRounds : public AveragingRounds {
 public:
  // `island`: over this rank's island; `cross`: over its cross group (null
  // where its position owns no shard). INVALID_ARGUMENT as
  // ParameterAveraging::Create for this rank's shard.
  static absl::StatusOr<std::unique_ptr<IslandRounds>> Create(std::vector<torch::Tensor> params,
                                                             const IslandLayout& layout, Communicator* island,
                                                             Communicator* cross, ParameterAveragingOptions options);

  void ResetAnchor() override;
  absl::Status Round(const std::vector<double>& weights = {}) override;
  absl::Status Launch(int fragment, bool keep_local_steps, double weight = 1, bool overlap_scales = false,
                      std::vector<float> side = {}) override;
  absl::Status Advance(int count = -1) override;
  absl::Status Finish(int count = -1) override;
  bool in_flight() const override { return !in_flight_.empty(); }
  int fragments() const override { return fragments_; }
  // The shard owners' rounds across islands take it (ranks without a shard
  // send nothing across islands).
  bool SetRoundShape(RoundShape shape) override {
    return averaging_ != nullptr ? averaging_->SetRoundShape(shape) : int8_ || shape == RoundShape::kAllReduce;
  }
  int round_ranks() const override { return islands_; }
  const AveragingRoundStats& last_round() const override { return stats_; }

  std::vector<torch::Tensor> Residuals() const override;
  absl::Status RestoreResiduals(const std::vector<torch::Tensor>& state) override;
  std::vector<torch::Tensor> OuterState() const override { return outer_; }
  absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state) override;
  absl::Status GatherOuterState() override;

  // Tensor indices of each shard (shard p is position p's).
  const std::vector<std::vector<int>>& shards() const { return shards_; }
  // Whether this rank averages a shard across islands.
  bool owns_shard() const { return averaging_ != nullptr; }

 private:
  IslandRounds(std::vector<torch::Tensor> params, Communicator* island, std::vector<std::vector<int>> shards,
               int fragments, bool nesterov, int islands, bool int8);
  // Every shard's owner broadcasts it to the island (a collective of the
  // island, in shard order); adds its bytes and time to stats_.
  absl::Status ShareShards();
  // stats_ from this rank's own round (if any), then ShareShards.
  absl::Status AfterMerge(const absl::Status& merged);
  // The island's all-gather of its owners' newest side payloads, `floats`
  // per rank of a cross group, into stats_.side_payloads (see above).
  absl::Status ShareSidePayloads(size_t floats);
  // Shard `s`'s tensors flattened into one, or written back from one.
  torch::Tensor FlatShard(const std::vector<torch::Tensor>& tensors, int s) const;
  void Unflatten(const torch::Tensor& flat, int s, std::vector<torch::Tensor>* into) const;
  torch::Tensor ShardTag() const;

  std::vector<torch::Tensor> params_;
  Communicator* island_;
  std::vector<std::vector<int>> shards_;
  const int fragments_;
  const bool nesterov_;
  const int islands_;
  const bool int8_;
  int own_shard_ = -1;
  std::unique_ptr<ParameterAveraging> averaging_;  // shard owners only
  // The rounds in flight, in launch order: each one's side payload size.
  std::deque<size_t> in_flight_;
  AveragingRoundStats stats_;
  // The whole outer state, one tensor per parameter (empty for outer none).
  std::vector<torch::Tensor> outer_;
};

}  // namespace herd
