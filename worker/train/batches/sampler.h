// Which samples each rank trains on. One global permutation per epoch, a pure
// function of (seed, epoch); a step consumes the next indices of it (the sum
// of the ranks' shares), split among the ranks by their shares. Because the
// step is addressed by its position in the epoch, a restart, a world-size
// change or new shares continue from the committed position and every sample
// of the epoch is still used exactly once. No LibTorch: this is plain C++.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace herd {

// A permutation of [0, n): Fisher-Yates driven by xoshiro256** seeded through
// splitmix64 from (seed, epoch), with our own unbiased range reduction, so it
// is bit-identical on every machine and compiler.
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

struct StepSlice {
  std::vector<int64_t> indices;  // this rank's samples
  int64_t global_count = 0;      // samples the whole step consumes (advance the position by this)
};

// One rank's part of a step: its micro-batches, in order, and how many
// samples the whole step consumes (advance the position by this). Every rank
// gets the same number of micro-batches; a rank whose share is used up gets
// empty ones.
struct StepPlan {
  std::vector<std::vector<int64_t>> micro_batches;
  int64_t global_count = 0;
  std::vector<int64_t> takes;  // each rank's samples in the step (sum: global_count)
};

class EpochSampler {
 public:
  EpochSampler(int64_t dataset_size, uint64_t seed);

  int64_t dataset_size() const { return dataset_size_; }

  // The step starting at `position` consumes m = min(world_size *
  // per_rank_batch, n - position) indices; rank r takes
  // [position + r * ceil(m / W), +ceil(m / W)) clipped to the step's end, so
  // on the last short step some ranks may get none. Requires 0 <= rank <
  // world_size and per_rank_batch > 0; otherwise the slice is empty.
  // Thread-safe.
  StepSlice Slice(int64_t epoch, int64_t position, int world_size, int rank, int64_t per_rank_batch) const;

  // The step starting at `position` with shares[r] samples for rank r (all
  // >= 0, sum T > 0) and micro-batches of at most `micro_batch` samples:
  // - it consumes m = min(T, n - position) indices;
  // - rank r takes t_r of them: its share on a full step; on the epoch's
  //   short last step ceil(m * shares[r] / T), clipped in rank order so the
  //   takes sum to m (some ranks may get none);
  // - in micro-round k, every rank in rank order takes the next
  //   min(micro_batch, t_r - k * micro_batch) indices (at least 0), for
  //   max_r ceil(t_r / micro_batch) rounds.
  // With equal shares of per_rank_batch * A this is A micro-rounds of
  // world_size * per_rank_batch samples, each split as Slice splits a step.
  // Bad arguments (rank outside shares, a negative share, T <= 0,
  // micro_batch <= 0) give an empty plan. Thread-safe.
  StepPlan PlanStep(int64_t epoch, int64_t position, const std::vector<int64_t>& shares, int rank,
                    int64_t micro_batch) const;

 private:
  // The indices [begin, end) of `epoch`'s permutation.
  std::vector<int64_t> Range(int64_t epoch, int64_t begin, int64_t end) const;

  const int64_t dataset_size_;
  const uint64_t seed_;
  // The latest epoch's permutation: Slice runs every step.
  mutable std::mutex mu_;
  mutable bool has_cache_ = false;
  mutable int64_t cached_epoch_ = 0;
  mutable std::vector<int64_t> cached_permutation_;
};

}  // namespace herd
