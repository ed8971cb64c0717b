// Gathers the next step's batches on a thread of its own while the current
// step runs, so the step loop's thread only launches work. On CUDA the
// gather (an index_select on the host) and the copy into pinned memory are
// host work that would otherwise sit between two steps' kernel launches,
// with the GPU idle behind them; the copy to the device stays on the step's
// thread and stream (non_blocking, from pinned memory), so nothing about
// ordering or device memory changes.
//
// The step loop asks for the batches it needs by their indices. A
// prefetched batch is used only when it was gathered for exactly those
// indices; anything else (new shares, a new generation, a restore) is a
// miss: the queue is dropped and the batch gathered on the spot. A batch is
// therefore always the same bytes with or without prefetching.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/data/dataset.h"

namespace herd {

// Prefetch and Take are called from one thread, the step loop's.
class BatchPrefetcher {
 public:
  // Gathers from `data`, which must outlive this. With `pin`, batches land in
  // pinned host memory, with `device` (a CUDA device) current on the
  // gathering thread so that pinning never touches another GPU.
  BatchPrefetcher(const Dataset* data, bool pin, const torch::Device& device);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Queues the gathers of `micro_batches`, in order, behind those queued
  // earlier and not yet taken.
  void Prefetch(const std::vector<std::vector<int64_t>>& micro_batches);

  // The batch at `indices` (pinned where configured): the oldest queued one
  // if it is for exactly these indices (waiting for its gather to finish),
  // else every queued one is dropped and this one is gathered here. A gather
  // that failed in the background is repeated here, so its error (a
  // c10::Error) is thrown by this call, as a synchronous gather would.
  Batch Take(const std::vector<int64_t>& indices);

  int64_t hits() const;
  int64_t misses() const;

 private:
  struct Request {
    std::vector<int64_t> indices;
    enum class State { kQueued, kGathering, kReady, kFailed } state = State::kQueued;
    Batch batch;
  };

  Batch Gather(const std::vector<int64_t>& indices) const;
  void Loop();

  const Dataset* const data_;
  const bool pin_;
  const torch::Device device_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Request>> queue_;  // front: the next batch the step loop takes
  bool stopping_ = false;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace herd
