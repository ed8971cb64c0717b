// Which samples each rank trains on. One global permutation per epoch, a pure
// function of (seed, epoch); a step consumes the next world_size * batch
// indices of it, split into contiguous per-rank shares. Because the step is
// addressed by its position in the epoch, a restart or a world-size change
// continues from the committed position and every sample of the epoch is
// still used exactly once. No LibTorch: this is plain C++.
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

 private:
  const int64_t dataset_size_;
  const uint64_t seed_;
  // The latest epoch's permutation: Slice runs every step.
  mutable std::mutex mu_;
  mutable bool has_cache_ = false;
  mutable int64_t cached_epoch_ = 0;
  mutable std::vector<int64_t> cached_permutation_;
};

}  // namespace herd
