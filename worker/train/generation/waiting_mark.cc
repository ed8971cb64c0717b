#include "worker/train/generation/waiting_mark.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "worker/comm/forwarding_communicator.h"

namespace herd {
namespace {

// A collective as a wait: begun at issue, ended when waited for, or when
// dropped (ended well if it had finished, else as a failure: a generation
// that drops collectives in flight is failing).
class MarkedWork : public Work {
 public:
  // The marker asks the inner Work's Done() and, once done, its Wait()
  // only while this is alive: the wait ends (and leaves the marker, under
  // the marker's lock) in the destructor at the latest.
  MarkedWork(std::shared_ptr<Work> inner, WaitingMarker* marker)
      : inner_(std::move(inner)),
        marker_(marker),
        wait_(marker->Begin([work = inner_.get()]() -> std::optional<bool> {
          if (!work->Done()) return std::nullopt;
          return work->Wait().ok();  // at once: it is done (CPU)
        })) {}
  ~MarkedWork() override {
    if (!ended_.exchange(true)) marker_->End(wait_, inner_->Done());
  }

  absl::Status Wait() override {
    absl::Status status = inner_->Wait();
    if (!ended_.exchange(true)) marker_->End(wait_, status.ok());
    return status;
  }
  bool Done() const override { return inner_->Done(); }
  WorkTimes times() const override { return inner_->times(); }

 private:
  const std::shared_ptr<Work> inner_;
  WaitingMarker* const marker_;
  const uint64_t wait_;
  std::atomic<bool> ended_{false};
};

class MarkingCommunicator : public ForwardingCommunicator {
 public:
  MarkingCommunicator(Communicator* inner, WaitingMarker* marker) : ForwardingCommunicator(inner), marker_(marker) {}

 protected:
  std::shared_ptr<Work> Issue(Issuer issue) override { return std::make_shared<MarkedWork>(issue(), marker_); }

 private:
  WaitingMarker* const marker_;
};

}  // namespace

std::string WaitingMarkKey(int rank) { return absl::StrCat("waiting/", rank); }

std::chrono::milliseconds WaitingMarkAfter(std::chrono::milliseconds collective_timeout) {
  return collective_timeout / 2;
}

bool PostsWaitingMarks(bool on_cuda, int world_size) { return !on_cuda && world_size > 1; }

std::chrono::milliseconds WaitingMarkRecheck(std::chrono::milliseconds after) {
  return std::max(after / 4, std::chrono::milliseconds(1));
}

WaitingMarkStep NextWaitingMarkStep(const WaitingMarkState& state, WaitingMarkState::Time now,
                                    std::chrono::milliseconds after) {
  WaitingMarkStep step;
  if (state.failed) return step;
  const bool long_wait = state.oldest_wait.has_value() && now - *state.oldest_wait >= after;
  if (long_wait != state.posted) {
    if (state.retry_at.has_value() && now < *state.retry_at) {
      step.wake = *state.retry_at;
    } else {
      step.post = long_wait;
    }
  } else if (state.posted) {
    step.wake = now + WaitingMarkRecheck(after);
  } else {
    step.wake = state.oldest_wait.value_or(now) + after;
  }
  return step;
}

WaitingMarker::WaitingMarker(std::shared_ptr<RendezvousStore> store, int rank, std::chrono::milliseconds after,
                             std::function<void()> on_mark)
    : store_(std::move(store)), rank_(rank), after_(after), on_mark_(std::move(on_mark)), thread_([this] { Run(); }) {}

WaitingMarker::~WaitingMarker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

uint64_t WaitingMarker::Begin(Outcome outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  waits_.emplace(id, Wait{std::chrono::steady_clock::now(), std::move(outcome)});
  // No wake-up: the thread looks again within `after` of any wait's start.
  return id;
}

void WaitingMarker::End(uint64_t wait, bool ok) {
  bool clear = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waits_.erase(wait);
    if (!ok) state_.failed = true;
    clear = state_.posted && !state_.failed;
  }
  if (clear) changed_.notify_all();
}

std::optional<WaitingMarkState::Time> WaitingMarker::OldestInFlight() {
  for (const auto& [id, wait] : waits_) {
    const std::optional<bool> ended = wait.outcome ? wait.outcome() : std::nullopt;
    if (!ended.has_value()) return wait.began;
    if (!*ended) state_.failed = true;
  }
  return std::nullopt;
}

void WaitingMarker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    state_.oldest_wait = OldestInFlight();
    const WaitingMarkStep step = NextWaitingMarkStep(state_, std::chrono::steady_clock::now(), after_);
    if (!step.post.has_value()) {
      if (step.wake.has_value()) {
        changed_.wait_until(lock, *step.wake);
      } else {
        changed_.wait(lock);
      }
      continue;
    }
    lock.unlock();
    absl::Status posted = store_->Set(WaitingMarkKey(rank_), *step.post ? kWaitingMark : kMovingMark);
    lock.lock();
    // FAILED_PRECONDITION: the generation has ended; nobody reads the mark.
    if (posted.ok() || posted.code() == absl::StatusCode::kFailedPrecondition) {
      state_.posted = *step.post;
      state_.retry_at.reset();
      if (*step.post && on_mark_) on_mark_();
    } else {
      LOG(WARNING) << "could not post rank " << rank_ << "'s waiting mark (tried again): " << posted;
      state_.retry_at = std::chrono::steady_clock::now() + WaitingMarkRecheck(after_);
    }
  }
}

std::unique_ptr<Communicator> MarkWaitsOf(Communicator* inner, WaitingMarker* marker) {
  return std::make_unique<MarkingCommunicator>(inner, marker);
}

}  // namespace herd
