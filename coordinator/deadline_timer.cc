#include "coordinator/deadline_timer.h"

namespace herd::coordinator {

DeadlineTimer::DeadlineTimer(absl::AnyInvocable<void(std::vector<uint64_t>)> expire, const Clock* clock)
    : expire_(std::move(expire)), clock_(clock != nullptr ? clock : &monotonic_), thread_([this] { Run(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    earlier_.Signal();
  }
  thread_.join();
}

void DeadlineTimer::Add(uint64_t id, double deadline) {
  absl::MutexLock lock(&mu_);
  if (deadlines_.empty() || deadline < deadlines_.begin()->first) earlier_.Signal();
  deadlines_.emplace(deadline, id);
}

void DeadlineTimer::Remove(uint64_t id, double deadline) {
  absl::MutexLock lock(&mu_);
  deadlines_.erase({deadline, id});
}

std::vector<uint64_t> DeadlineTimer::TakeDue() {
  std::vector<uint64_t> due;
  const double now = clock_->Now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    due.push_back(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
  }
  return due;
}

void DeadlineTimer::FireDue() {
  std::vector<uint64_t> due;
  {
    absl::MutexLock lock(&mu_);
    due = TakeDue();
  }
  if (!due.empty()) expire_(std::move(due));
}

void DeadlineTimer::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      earlier_.Wait(&mu_);
      continue;
    }
    const double left = deadlines_.begin()->first - clock_->Now();
    if (left > 0) {
      earlier_.WaitWithTimeout(&mu_, absl::Seconds(left));
      continue;
    }
    std::vector<uint64_t> due = TakeDue();
    mu_.Unlock();
    expire_(std::move(due));
    mu_.Lock();
  }
}

}  // namespace herd::coordinator
