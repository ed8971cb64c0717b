#include "worker/train/batches/batch_prefetcher.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace herd {
namespace {

// Sample i is the row {i} with label i; a negative index fails like a real
// gather. Records which thread gathered which indices.
class RecordingDataset : public Dataset {
 public:
  int64_t size() const override { return 1000; }
  int64_t num_classes() const override { return 1000; }
  std::vector<int64_t> sample_shape() const override { return {1}; }
  Batch Get(const std::vector<int64_t>& indices) const override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      gathers_.push_back({indices, std::this_thread::get_id()});
      released_.wait(lock, [&] { return !held_; });
    }
    for (int64_t i : indices) TORCH_CHECK(i >= 0 && i < size(), "index ", i, " out of range");
    auto ids = torch::tensor(indices, torch::kInt64);
    return Batch{ids.to(torch::kFloat32).reshape({-1, 1}), ids};
  }

  struct Gather {
    std::vector<int64_t> indices;
    std::thread::id thread;
  };
  std::vector<Gather> gathers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return gathers_;
  }
  // While held, every gather waits (after recording itself).
  void Hold(bool held) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = held;
    }
    released_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable released_;
  mutable std::vector<Gather> gathers_;
  bool held_ = false;
};

std::vector<int64_t> Labels(const Batch& batch) {
  return std::vector<int64_t>(batch.targets.data_ptr<int64_t>(), batch.targets.data_ptr<int64_t>() + batch.targets.numel());
}

TEST(BatchPrefetcher, PrefetchedBatchesAreTheRequestedOnesGatheredOffTheCallersThread) {
  RecordingDataset data;
  RecordingDataset reference;  // gathers here would interleave with the prefetcher's in `data`'s record
  BatchPrefetcher prefetcher(&data, /*pin=*/false, torch::Device(torch::kCPU));
  prefetcher.Prefetch({{3, 1, 4}, {1, 5}});
  prefetcher.Prefetch({{9, 2}});
  for (const std::vector<int64_t>& want : {std::vector<int64_t>{3, 1, 4}, {1, 5}, {9, 2}}) {
    Batch batch = prefetcher.Take(want);
    EXPECT_EQ(Labels(batch), want);
    EXPECT_TRUE(torch::equal(batch.inputs, reference.Get(want).inputs));
  }
  EXPECT_EQ(prefetcher.hits(), 3);
  EXPECT_EQ(prefetcher.misses(), 0);
  // Each prefetched batch was gathered once, in order, on the prefetcher's thread.
  const auto gathers = data.gathers();
  ASSERT_GE(gathers.size(), 3u);
  EXPECT_EQ(gathers[0].indices, (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(gathers[1].indices, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(gathers[2].indices, (std::vector<int64_t>{9, 2}));
  for (int i = 0; i < 3; ++i) EXPECT_NE(gathers[i].thread, std::this_thread::get_id());
}

TEST(BatchPrefetcher, AMispredictedPlanDropsTheQueueAndGathersOnTheSpot) {
  RecordingDataset data;
  BatchPrefetcher prefetcher(&data, /*pin=*/false, torch::Device(torch::kCPU));
  prefetcher.Prefetch({{1, 2}, {3, 4}});
  // The step wants other samples (new shares, another generation): the exact batch, gathered here.
  EXPECT_EQ(Labels(prefetcher.Take({7, 8})), (std::vector<int64_t>{7, 8}));
  // What was queued behind it was dropped too: never handed out for a later request.
  EXPECT_EQ(Labels(prefetcher.Take({3, 4})), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(prefetcher.hits(), 0);
  EXPECT_EQ(prefetcher.misses(), 2);
  const auto gathers = data.gathers();
  bool gathered_here = false;
  for (const auto& g : gathers) gathered_here |= g.indices == std::vector<int64_t>{7, 8} && g.thread == std::this_thread::get_id();
  EXPECT_TRUE(gathered_here);
  // Prefetching resumes with the next plan.
  prefetcher.Prefetch({{5}});
  EXPECT_EQ(Labels(prefetcher.Take({5})), (std::vector<int64_t>{5}));
  EXPECT_EQ(prefetcher.hits(), 1);
}

TEST(BatchPrefetcher, TakeWaitsForTheGatherInProgress) {
  RecordingDataset data;
  BatchPrefetcher prefetcher(&data, /*pin=*/false, torch::Device(torch::kCPU));
  data.Hold(true);
  prefetcher.Prefetch({{6, 6}});
  Batch taken;
  std::thread step([&] { taken = prefetcher.Take({6, 6}); });
  // The gather started (it records itself before waiting) and the step waits for it, not a gather of its own.
  while (data.gathers().empty()) std::this_thread::yield();
  data.Hold(false);
  step.join();
  EXPECT_EQ(Labels(taken), (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(prefetcher.hits(), 1);
  EXPECT_EQ(data.gathers().size(), 1u);
}

TEST(BatchPrefetcher, AFailedBackgroundGatherThrowsFromTakeAsASynchronousOneWould) {
  RecordingDataset data;
  BatchPrefetcher prefetcher(&data, /*pin=*/false, torch::Device(torch::kCPU));
  prefetcher.Prefetch({{1, -1}, {2}});
  EXPECT_THROW(prefetcher.Take({1, -1}), c10::Error);
  EXPECT_EQ(prefetcher.misses(), 1);
  // The queue behind the failure is intact.
  EXPECT_EQ(Labels(prefetcher.Take({2})), (std::vector<int64_t>{2}));
  EXPECT_EQ(prefetcher.hits(), 1);
}

TEST(BatchPrefetcher, DestroyedWithBatchesQueuedAndInProgress) {
  RecordingDataset data;
  {
    BatchPrefetcher prefetcher(&data, /*pin=*/false, torch::Device(torch::kCPU));
    prefetcher.Prefetch({{1}, {2}, {3}});
    while (data.gathers().empty()) std::this_thread::yield();
  }  // joins its thread: nothing left running against `data`
  const size_t gathered = data.gathers().size();
  EXPECT_GE(gathered, 1u);
  EXPECT_LE(gathered, 3u);
}

}  // namespace
}  // namespace herd
