#include "worker/train/batches/batch_prefetcher.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <exception>
#include <utility>

namespace herd {

BatchPrefetcher::BatchPrefetcher(const Dataset* data, bool pin, const torch::Device& device)
    : data_(data), pin_(pin), device_(device), thread_([this] { Loop(); }) {}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BatchPrefetcher::Prefetch(const std::vector<std::vector<int64_t>>& micro_batches) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& indices : micro_batches) {
      auto request = std::make_shared<Request>();
      request->indices = indices;
      queue_.push_back(std::move(request));
    }
  }
  changed_.notify_all();
}

Batch BatchPrefetcher::Take(const std::vector<int64_t>& indices) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!queue_.empty() && queue_.front()->indices == indices) {
    // Stays queued until gathered: the gathering thread only sees the queue.
    std::shared_ptr<Request> request = queue_.front();
    changed_.wait(lock, [&] {
      return request->state == Request::State::kReady || request->state == Request::State::kFailed;
    });
    queue_.pop_front();
    if (request->state == Request::State::kReady) {
      ++hits_;
      return std::move(request->batch);
    }
  } else {
    // Mispredicted: what is queued belongs to a plan that no longer holds.
    // A gather in progress finishes into a request nobody holds.
    queue_.clear();
  }
  ++misses_;
  lock.unlock();
  return Gather(indices);
}

int64_t BatchPrefetcher::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t BatchPrefetcher::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

Batch BatchPrefetcher::Gather(const std::vector<int64_t>& indices) const {
  Batch batch = data_->Get(indices);
  if (pin_) {
    batch.inputs = batch.inputs.pin_memory();
    batch.targets = batch.targets.pin_memory();
  }
  return batch;
}

void BatchPrefetcher::Loop() {
  // Pinning initializes the device's context on this thread: the trainer's
  // own device, never device 0 by default.
  std::unique_ptr<c10::DeviceGuard> on_device;
  if (pin_ && device_.is_cuda()) on_device = std::make_unique<c10::DeviceGuard>(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::shared_ptr<Request> next;
    changed_.wait(lock, [&] {
      if (stopping_) return true;
      auto queued = std::find_if(queue_.begin(), queue_.end(),
                                 [](const auto& r) { return r->state == Request::State::kQueued; });
      if (queued == queue_.end()) return false;
      next = *queued;
      return true;
    });
    if (stopping_) return;
    next->state = Request::State::kGathering;
    lock.unlock();
    Batch batch;
    bool ok = true;
    try {
      batch = Gather(next->indices);
    } catch (const std::exception&) {
      ok = false;  // Take gathers it again and throws there, in the step
    }
    lock.lock();
    next->batch = std::move(batch);
    next->state = ok ? Request::State::kReady : Request::State::kFailed;
    changed_.notify_all();
  }
}

}  // namespace herd
