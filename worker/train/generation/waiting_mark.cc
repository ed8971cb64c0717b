#include "worker/train/generation/waiting_mark.h"

#include <glog/logging.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "worker/comm/forwarding_communicator.h"

namespace herd {
namespace {

// A collective as a wait: begun at issue, ended when waited for, or when
// dropped (ended well if it had finished, else as a failure: a generation
// that drops collectives in flight is failing).
class MarkedWork : public Work {
 public:
  // The marker asks Done() only while this is alive: the wait ends (and
  // leaves the marker) in the destructor at the latest.
  MarkedWork(std::shared_ptr<Work> inner, WaitingMarker* marker)
      : inner_(std::move(inner)), marker_(marker), wait_(marker->Begin([work = inner_.get()] { return work->Done(); })) {}
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

WaitingMarkStep NextWaitingMarkStep(const WaitingMarkState& state, WaitingMarkState::Time now,
                                    std::chrono::milliseconds after) {
  const bool long_wait = state.oldest_wait.has_value() && now - *state.oldest_wait >= after;
  WaitingMarkStep step;
  if (!state.failed && long_wait != state.posted) step.post = long_wait;
  if (!state.failed && !state.posted) step.wake = state.oldest_wait.value_or(now) + after;
  return step;
}

struct WaitingMarker::Shared {
  struct Wait {
    WaitingMarkState::Time began;
    std::function<bool()> finished;
  };

  // The start of the oldest wait still in flight.
  std::optional<WaitingMarkState::Time> OldestInFlight() const {
    for (const auto& [id, wait] : waits) {
      if (!wait.finished || !wait.finished()) return wait.began;
    }
    return std::nullopt;
  }

  std::shared_ptr<RendezvousStore> store;
  int rank = 0;
  std::chrono::milliseconds after{0};
  std::mutex mu;
  std::condition_variable changed;
  std::map<uint64_t, Wait> waits;  // by id: ids rise with time, so the first is the oldest
  uint64_t next_id = 1;
  WaitingMarkState state;
  bool stop = false;
  bool posting = false;  // a Set is under way, outside the lock
};

WaitingMarker::WaitingMarker(std::shared_ptr<RendezvousStore> store, int rank, std::chrono::milliseconds after)
    : shared_(std::make_shared<Shared>()) {
  shared_->store = std::move(store);
  shared_->rank = rank;
  shared_->after = after;
  thread_ = std::thread([shared = shared_] { Run(shared); });
}

WaitingMarker::~WaitingMarker() {
  bool posting = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
    posting = shared_->posting;
  }
  shared_->changed.notify_all();
  // A post under way ends on its own (its RPC's deadline); the thread then
  // sees `stop` and asks no probe of a wait, whose collectives are gone.
  if (posting) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

uint64_t WaitingMarker::Begin(std::function<bool()> finished) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  const uint64_t id = shared_->next_id++;
  shared_->waits.emplace(id, Shared::Wait{std::chrono::steady_clock::now(), std::move(finished)});
  // No wake-up: the thread looks again within `after` of any wait's start.
  return id;
}

void WaitingMarker::End(uint64_t wait, bool ok) {
  bool clear = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->waits.erase(wait);
    if (!ok) shared_->state.failed = true;
    clear = shared_->state.posted && !shared_->state.failed;
  }
  if (clear) shared_->changed.notify_all();
}

void WaitingMarker::Run(const std::shared_ptr<Shared>& shared) {
  Shared& s = *shared;
  std::unique_lock<std::mutex> lock(s.mu);
  while (!s.stop) {
    s.state.oldest_wait = s.OldestInFlight();
    const WaitingMarkStep step = NextWaitingMarkStep(s.state, std::chrono::steady_clock::now(), s.after);
    if (!step.post.has_value()) {
      if (step.wake.has_value()) {
        s.changed.wait_until(lock, *step.wake);
      } else {
        s.changed.wait(lock);
      }
      continue;
    }
    s.state.posted = *step.post;
    s.posting = true;
    lock.unlock();
    absl::Status posted = s.store->Set(WaitingMarkKey(s.rank), *step.post ? kWaitingMark : kMovingMark);
    // FAILED_PRECONDITION: the generation has ended; nobody reads the mark.
    if (!posted.ok() && posted.code() != absl::StatusCode::kFailedPrecondition) {
      LOG(WARNING) << "could not post rank " << s.rank << "'s waiting mark: " << posted;
    }
    lock.lock();
    s.posting = false;
  }
}

std::unique_ptr<Communicator> MarkWaitsOf(Communicator* inner, WaitingMarker* marker) {
  return std::make_unique<MarkingCommunicator>(inner, marker);
}

}  // namespace herd
