#include "worker/train/testing/faulty_communicator.h"

namespace herd {
namespace {

class FailedWork : public Work {
 public:
  explicit FailedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool Done() const override { return true; }

 private:
  absl::Status status_;
};

}  // namespace

FaultyCommunicator::FaultyCommunicator(std::unique_ptr<Communicator> inner, int64_t fail_at, absl::Status failure,
                                       std::function<void()> on_fail)
    : inner_(std::move(inner)), fail_at_(fail_at), failure_(std::move(failure)), on_fail_(std::move(on_fail)) {}

std::shared_ptr<Work> FaultyCommunicator::Fault() {
  if (++calls_ < fail_at_) return nullptr;
  if (calls_ == fail_at_ && on_fail_) on_fail_();
  return std::make_shared<FailedWork>(failure_);
}

std::shared_ptr<Work> FaultyCommunicator::AllReduceAsync(void* data, size_t count, DataType type) {
  if (auto failed = Fault()) return failed;
  return inner_->AllReduceAsync(data, count, type);
}

std::shared_ptr<Work> FaultyCommunicator::BroadcastAsync(void* data, size_t bytes, int root) {
  if (auto failed = Fault()) return failed;
  return inner_->BroadcastAsync(data, bytes, root);
}

std::shared_ptr<Work> FaultyCommunicator::AllGatherAsync(const void* in, size_t bytes, void* out) {
  if (auto failed = Fault()) return failed;
  return inner_->AllGatherAsync(in, bytes, out);
}

std::shared_ptr<Work> FaultyCommunicator::ReduceScatterAsync(const void* in, void* out, size_t block_count,
                                                              DataType type) {
  if (auto failed = Fault()) return failed;
  return inner_->ReduceScatterAsync(in, out, block_count, type);
}

std::shared_ptr<Work> FaultyCommunicator::ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) {
  if (auto failed = Fault()) return failed;
  return inner_->ReduceScatterInPlaceAsync(data, count, type);
}

std::shared_ptr<Work> FaultyCommunicator::BarrierAsync() {
  if (auto failed = Fault()) return failed;
  return inner_->BarrierAsync();
}

}  // namespace herd
