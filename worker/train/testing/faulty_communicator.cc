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
    : ForwardingCommunicator(inner.get()),
      owned_(std::move(inner)),
      fail_at_(fail_at),
      failure_(std::move(failure)),
      on_fail_(std::move(on_fail)) {}

std::shared_ptr<Work> FaultyCommunicator::Fault() {
  if (++calls_ < fail_at_) return nullptr;
  if (calls_ == fail_at_ && on_fail_) on_fail_();
  return std::make_shared<FailedWork>(failure_);
}

std::shared_ptr<Work> FaultyCommunicator::Issue(Issuer issue) {
  if (auto failed = Fault()) return failed;
  return issue();
}

}  // namespace herd
