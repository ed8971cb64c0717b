#include "worker/train/batches/sampler.h"

#include <algorithm>
#include <utility>

namespace herd {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t RotateLeft(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// xoshiro256** (Blackman & Vigna): fast, well mixed, fully specified.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t& word : s_) word = SplitMix64(seed);
  }

  uint64_t Next() {
    const uint64_t result = RotateLeft(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = RotateLeft(s_[3], 45);
    return result;
  }

  // Uniform in [0, bound) without modulo bias: reject the short top range.
  uint64_t Below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t s_[4];
};

uint64_t MixSeed(uint64_t seed, int64_t epoch) {
  uint64_t state = seed;
  const uint64_t a = SplitMix64(state);
  state = a ^ static_cast<uint64_t>(epoch);
  return SplitMix64(state);
}

}  // namespace

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(std::max<int64_t>(n, 0));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  Xoshiro256 rng(MixSeed(seed, epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

EpochSampler::EpochSampler(int64_t dataset_size, uint64_t seed)
    : dataset_size_(std::max<int64_t>(dataset_size, 0)), seed_(seed) {}

StepSlice EpochSampler::Slice(int64_t epoch, int64_t position, int world_size, int rank,
                              int64_t per_rank_batch) const {
  StepSlice slice;
  if (world_size <= 0 || rank < 0 || rank >= world_size || per_rank_batch <= 0) return slice;
  const StepPlan plan =
      PlanStep(epoch, position, std::vector<int64_t>(static_cast<size_t>(world_size), per_rank_batch), rank,
               per_rank_batch);
  slice.global_count = plan.global_count;
  if (!plan.micro_batches.empty()) slice.indices = plan.micro_batches.front();
  return slice;
}

StepPlan EpochSampler::PlanStep(int64_t epoch, int64_t position, const std::vector<int64_t>& shares, int rank,
                                int64_t micro_batch) const {
  StepPlan plan;
  int64_t total = 0;
  for (int64_t share : shares) {
    if (share < 0 || share > (int64_t{1} << 40)) return plan;
    total += share;
  }
  if (rank < 0 || static_cast<size_t>(rank) >= shares.size() || total <= 0 || micro_batch <= 0 || position < 0) {
    return plan;
  }
  const int64_t step = std::min<int64_t>(total, std::max<int64_t>(dataset_size_ - position, 0));
  plan.global_count = step;
  if (step == 0) return plan;
  // Each rank's take of the step.
  std::vector<int64_t> takes(shares.size());
  int64_t left = step;
  int64_t rounds = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    const int64_t want = step == total ? shares[r] : (step * shares[r] + total - 1) / total;
    takes[r] = std::min(want, left);
    left -= takes[r];
    rounds = std::max(rounds, (takes[r] + micro_batch - 1) / micro_batch);
  }
  plan.micro_batches.resize(static_cast<size_t>(rounds));
  plan.takes = takes;
  int64_t offset = position;
  for (int64_t k = 0; k < rounds; ++k) {
    for (size_t r = 0; r < takes.size(); ++r) {
      const int64_t n = std::clamp<int64_t>(takes[r] - k * micro_batch, 0, micro_batch);
      if (static_cast<int>(r) == rank && n > 0) plan.micro_batches[k] = Range(epoch, offset, offset + n);
      offset += n;
    }
  }
  return plan;
}

std::vector<int64_t> EpochSampler::Range(int64_t epoch, int64_t begin, int64_t end) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!has_cache_ || cached_epoch_ != epoch) {
    cached_permutation_ = EpochPermutation(dataset_size_, seed_, epoch);
    cached_epoch_ = epoch;
    has_cache_ = true;
  }
  return std::vector<int64_t>(cached_permutation_.begin() + begin, cached_permutation_.begin() + end);
}

}  // namespace herd
