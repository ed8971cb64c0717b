#include "worker/train/sync/island_sync.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "worker/comm/peer_fault.h"

namespace herd {

absl::StatusOr<std::unique_ptr<IslandRounds>> IslandRounds::Create(std::vector<torch::Tensor> params,
                                                                   const IslandLayout& layout, Communicator* island,
                                                                   Communicator* cross,
                                                                   ParameterAveragingOptions options) {
  std::vector<int64_t> bytes;
  for (const auto& p : params) bytes.push_back(static_cast<int64_t>(p.nbytes()));
  std::vector<std::vector<int>> shards = AssignShards(bytes, layout.shards);
  // Fewer tensors than positions: the empty shards have no owner.
  while (!shards.empty() && shards.back().empty()) shards.pop_back();
  std::unique_ptr<IslandRounds> rounds(new IslandRounds(params, island, shards, options.fragments,
                                                        options.outer.kind == OuterKind::kNesterov,
                                                        static_cast<int>(layout.values.size()), options.int8_wire));
  const int position = layout.position;
  if (cross != nullptr && position < static_cast<int>(shards.size())) {
    std::vector<torch::Tensor> mine;
    for (int t : shards[static_cast<size_t>(position)]) mine.push_back(params[static_cast<size_t>(t)]);
    auto averaging = ParameterAveraging::Create(std::move(mine), cross, options);
    if (!averaging.ok()) {
      return WithContext(averaging.status(), absl::StrCat("island shard ", position, " (",
                                                          shards[static_cast<size_t>(position)].size(), " tensors): "));
    }
    rounds->averaging_ = std::move(*averaging);
    rounds->own_shard_ = position;
  }
  return rounds;
}

IslandRounds::IslandRounds(std::vector<torch::Tensor> params, Communicator* island,
                           std::vector<std::vector<int>> shards, int fragments, bool nesterov, int islands,
                           bool int8)
    : params_(std::move(params)),
      island_(island),
      shards_(std::move(shards)),
      fragments_(fragments),
      nesterov_(nesterov),
      islands_(islands),
      int8_(int8) {
  if (!nesterov_) return;
  torch::NoGradGuard no_grad;
  // Fresh outer momentum is zero, as ParameterAveraging's own.
  for (const auto& p : params_) outer_.push_back(torch::zeros({p.numel()}, p.options().requires_grad(false)));
}

void IslandRounds::ResetAnchor() {
  if (averaging_ != nullptr) averaging_->ResetAnchor();
}

absl::Status IslandRounds::Round(const std::vector<double>& weights) {
  return AfterMerge(averaging_ != nullptr ? averaging_->Round(weights) : absl::OkStatus());
}

absl::Status IslandRounds::Launch(int fragment, bool keep_local_steps, double weight, bool overlap_scales,
                                  std::vector<float> side) {
  const size_t side_floats = side.size();
  if (averaging_ != nullptr) {
    if (auto s = averaging_->Launch(fragment, keep_local_steps, weight, overlap_scales, std::move(side)); !s.ok()) {
      return s;
    }
  }
  in_flight_.push_back(side_floats);
  return absl::OkStatus();
}

absl::Status IslandRounds::Advance(int count) {
  return averaging_ != nullptr ? averaging_->Advance(count) : absl::OkStatus();
}

absl::Status IslandRounds::Finish(int count) {
  const size_t n = count < 0 ? in_flight_.size() : std::min(static_cast<size_t>(count), in_flight_.size());
  absl::Status merged = averaging_ != nullptr ? averaging_->Finish(count) : absl::OkStatus();
  size_t side_floats = 0;  // the newest landing round's that has one
  for (size_t i = 0; i < n; ++i) {
    if (in_flight_.front() > 0) side_floats = in_flight_.front();
    in_flight_.pop_front();
  }
  if (auto s = AfterMerge(merged); !s.ok()) return s;
  return side_floats > 0 ? ShareSidePayloads(side_floats) : absl::OkStatus();
}

absl::Status IslandRounds::ShareSidePayloads(size_t floats) {
  const size_t row = floats * static_cast<size_t>(islands_);
  std::vector<float> mine(row, 0.0f);
  if (averaging_ != nullptr) {
    const auto& payloads = stats_.side_payloads;
    for (auto it = payloads.rbegin(); it != payloads.rend(); ++it) {
      if (it->empty()) continue;
      if (it->size() != row) {
        return absl::InternalError(absl::StrCat("a round's side payload has ", it->size(), " floats, expected ", row));
      }
      mine = *it;
      break;
    }
  }
  std::vector<float> all = mine;
  if (island_->size() >= 2) {
    all.assign(row * static_cast<size_t>(island_->size()), 0.0f);
    if (auto s = island_->AllGather(mine.data(), row * sizeof(float), all.data()); !s.ok()) {
      return WithContext(s, "sharing the rounds' measurements in the island: ");
    }
  }
  // Island rank s is position s; the owners are positions 0..shards-1.
  all.resize(std::min(all.size(), row * shards_.size()));
  stats_.side_payloads = {std::move(all)};
  return absl::OkStatus();
}

absl::Status IslandRounds::AfterMerge(const absl::Status& merged) {
  // A failed round fails the generation; the island's broadcasts then fail
  // too (the owner never sends), bounded by the collective timeout.
  if (!merged.ok()) return merged;
  if (averaging_ != nullptr) {
    stats_ = averaging_->last_round();
  } else {
    const int64_t rounds = stats_.rounds + 1;
    stats_ = AveragingRoundStats{};
    stats_.rounds = rounds;
  }
  return ShareShards();
}

torch::Tensor IslandRounds::FlatShard(const std::vector<torch::Tensor>& tensors, int s) const {
  std::vector<torch::Tensor> flat;
  for (int t : shards_[static_cast<size_t>(s)]) flat.push_back(tensors[static_cast<size_t>(t)].detach().reshape({-1}));
  return torch::cat(flat).contiguous();
}

void IslandRounds::Unflatten(const torch::Tensor& flat, int s, std::vector<torch::Tensor>* into) const {
  int64_t offset = 0;
  for (int t : shards_[static_cast<size_t>(s)]) {
    torch::Tensor target = (*into)[static_cast<size_t>(t)].detach();
    target.copy_(flat.narrow(0, offset, target.numel()).view(target.sizes()));
    offset += target.numel();
  }
}

absl::Status IslandRounds::ShareShards() {
  if (island_->size() < 2) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  // Shard s's owner is island rank s (its position).
  for (int s = 0; s < static_cast<int>(shards_.size()); ++s) {
    torch::Tensor flat = FlatShard(params_, s);
    const size_t bytes = static_cast<size_t>(flat.nbytes());
    if (auto status = island_->Broadcast(flat.data_ptr(), bytes, s); !status.ok()) {
      // WithContext keeps the blamed peer (peer_fault.h) for the report.
      return WithContext(status, absl::StrCat("sharing island shard ", s, ": "));
    }
    if (s == own_shard_) {
      stats_.wire_bytes += static_cast<int64_t>(bytes);
    } else {
      Unflatten(flat, s, &params_);
    }
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

absl::Status IslandRounds::GatherOuterState() {
  if (!nesterov_) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  if (averaging_ != nullptr) {
    const std::vector<torch::Tensor> mine = averaging_->OuterStateByParameter();
    const std::vector<int>& tensors = shards_[static_cast<size_t>(own_shard_)];
    for (size_t i = 0; i < tensors.size(); ++i) outer_[static_cast<size_t>(tensors[i])].copy_(mine[i]);
  }
  if (island_->size() < 2) return absl::OkStatus();
  for (int s = 0; s < static_cast<int>(shards_.size()); ++s) {
    torch::Tensor flat = FlatShard(outer_, s);
    if (auto status = island_->Broadcast(flat.data_ptr(), static_cast<size_t>(flat.nbytes()), s); !status.ok()) {
      return WithContext(status, absl::StrCat("gathering the outer state of island shard ", s, ": "));
    }
    if (s != own_shard_) Unflatten(flat, s, &outer_);
  }
  return absl::OkStatus();
}

absl::Status IslandRounds::RestoreOuterState(const std::vector<torch::Tensor>& state) {
  const size_t expected = nesterov_ ? params_.size() : 0;
  if (state.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("outer optimizer state has ", state.size(),
                                                   " tensors, expected ", expected, " (one per parameter, islands)"));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].numel() != outer_[i].numel()) {
      return absl::InvalidArgumentError(absl::StrCat("outer optimizer state of parameter ", i, " has ",
                                                     state[i].numel(), " elements, expected ", outer_[i].numel()));
    }
    outer_[i].copy_(state[i].reshape({-1}));
  }
  if (averaging_ == nullptr) return absl::OkStatus();
  std::vector<torch::Tensor> mine;
  for (int t : shards_[static_cast<size_t>(own_shard_)]) mine.push_back(outer_[static_cast<size_t>(t)]);
  return averaging_->RestoreOuterStateByParameter(mine);
}

// The shard's tensor indices, kept after the residuals: they identify whose
// residuals these are.
torch::Tensor IslandRounds::ShardTag() const {
  const std::vector<int>& tensors = shards_[static_cast<size_t>(own_shard_)];
  return torch::tensor(std::vector<int64_t>(tensors.begin(), tensors.end()), torch::kInt64);
}

std::vector<torch::Tensor> IslandRounds::Residuals() const {
  if (averaging_ == nullptr) return {};
  std::vector<torch::Tensor> state = averaging_->Residuals();
  if (!state.empty()) state.push_back(ShardTag());
  return state;
}

absl::Status IslandRounds::RestoreResiduals(const std::vector<torch::Tensor>& state) {
  if (averaging_ == nullptr) return absl::OkStatus();
  // A re-formed generation may have given this rank another shard: its
  // residuals then start from zero, as a rank's starting from another
  // rank's state do.
  const bool same = !state.empty() && state.back().dtype() == torch::kInt64 && torch::equal(state.back(), ShardTag());
  if (!same) return averaging_->RestoreResiduals({});
  return averaging_->RestoreResiduals(std::vector<torch::Tensor>(state.begin(), state.end() - 1));
}

}  // namespace herd
