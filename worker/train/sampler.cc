#include "worker/train/sampler.h"

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
  if (world_size <= 0 || rank < 0 || rank >= world_size || per_rank_batch <= 0 || position < 0) return slice;
  const int64_t step = std::min<int64_t>(static_cast<int64_t>(world_size) * per_rank_batch,
                                         std::max<int64_t>(dataset_size_ - position, 0));
  slice.global_count = step;
  if (step == 0) return slice;
  const int64_t share = (step + world_size - 1) / world_size;
  const int64_t begin = position + std::min<int64_t>(rank * share, step);
  const int64_t end = std::min<int64_t>(begin + share, position + step);
  if (begin >= end) return slice;

  std::lock_guard<std::mutex> lock(mu_);
  if (!has_cache_ || cached_epoch_ != epoch) {
    cached_permutation_ = EpochPermutation(dataset_size_, seed_, epoch);
    cached_epoch_ = epoch;
    has_cache_ = true;
  }
  slice.indices.assign(cached_permutation_.begin() + begin, cached_permutation_.begin() + end);
  return slice;
}

}  // namespace herd
