// Tests only: a Communicator that passes collectives to a real one until a
// chosen call, then fails that call and every later one, after running a
// callback (where a test changes membership, as a coordinator would on
// noticing the fault). All ranks issue the same collectives in the same
// order, so "the Nth call" is the same collective on every rank.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace herd {

class FaultyCommunicator : public Communicator {
 public:
  // Fails calls number `fail_at` (1-based) and after with `failure`.
  FaultyCommunicator(std::unique_ptr<Communicator> inner, int64_t fail_at, absl::Status failure,
                     std::function<void()> on_fail);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  std::string backend() const override { return inner_->backend(); }

  std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) override;
  std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) override;
  std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) override;
  std::shared_ptr<Work> BarrierAsync() override;
  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) override;
  RangeLayout ReduceScatterLayout(size_t count, DataType type) const override {
    return inner_->ReduceScatterLayout(count, type);
  }
  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) override;

 private:
  // The failed Work when this call is at or past the fault, else null.
  std::shared_ptr<Work> Fault();

  std::unique_ptr<Communicator> inner_;
  const int64_t fail_at_;
  const absl::Status failure_;
  std::function<void()> on_fail_;
  std::atomic<int64_t> calls_{0};  // backward hooks may launch from autograd threads
};

}  // namespace herd
