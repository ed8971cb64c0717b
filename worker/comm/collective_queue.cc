#include "worker/comm/collective_queue.h"

#include <condition_variable>
#include <algorithm>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace herd {

struct CollectiveQueue::State {
  struct Entry {
    std::string what;
    TimedOp op;
    uint64_t sequence = 0;
    std::shared_ptr<PendingWork> work;
  };

  State(int concurrency, int lanes) : concurrency(concurrency), lanes(lanes), lane_busy(lanes, false) {}

  absl::Status BrokenError() const {  // requires mu
    absl::Status broken = absl::AbortedError(
        absl::StrCat("communicator is broken by an earlier failure: ",
                     absl::StatusCodeToString(first_error.code()), ": ", first_error.message()));
    // What the first failure blames (worker/comm/peer_fault.h) stays with it.
    first_error.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { broken.SetPayload(url, payload); });
    return broken;
  }

  int LaneOf(const Entry& entry) const { return lanes == 0 ? 0 : static_cast<int>(entry.sequence % lanes); }

  // The first pending op that may start now, or pending.end(): without
  // lanes only the head; with lanes the oldest op of a lane that is idle
  // (an older op of the same lane, still pending, goes first). Requires mu.
  std::deque<Entry>::iterator NextStartable() {
    if (running >= concurrency) return pending.end();
    if (lanes == 0) return pending.begin();
    std::vector<bool> seen(lanes, false);
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      const int lane = LaneOf(*it);
      if (!lane_busy[lane] && !seen[lane]) return it;
      seen[lane] = true;
    }
    return pending.end();
  }

  // Pops `it` (from NextStartable) to run; requires mu.
  void Take(std::deque<Entry>::iterator it, Entry& entry) {
    entry = std::move(*it);
    pending.erase(it);
    ++running;
    if (lanes > 0) lane_busy[LaneOf(entry)] = true;
  }

  // Runs an entry taken by TakeHead, on a worker or a waiting caller.
  void Execute(Entry& entry);
  void WorkerLoop();
  // Called by Wait(): runs `work` here if it is next and may start now.
  void RunInlineIfNext(const PendingWork* work);

  const int concurrency;
  const int lanes;              // 0: no lanes (ops start in issue order)
  std::vector<bool> lane_busy;  // per lane: an op of it is running
  mutable std::mutex mu;
  std::condition_variable changed;  // pending, running or stopping changed
  std::deque<Entry> pending;
  int running = 0;
  bool stopping = false;
  absl::Status first_error;
  uint64_t next_sequence = 0;
};

class CollectiveQueue::PendingWork : public Work {
 public:
  explicit PendingWork(std::weak_ptr<State> state) : state_(std::move(state)) {}

  WorkTimes times() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return times_;
  }

  // Before the op runs (queue thread or inline caller): its times so far.
  WorkTimes& running_times() { return running_times_; }

  absl::Status Wait() override {
    if (!Done()) {
      if (std::shared_ptr<State> state = state_.lock()) state->RunInlineIfNext(this);
    }
    std::unique_lock<std::mutex> lock(mu_);
    finished_.wait(lock, [&] { return done_; });
    return status_;
  }

  bool Done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

  void Complete(absl::Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      running_times_.finished = std::chrono::steady_clock::now();
      times_ = running_times_;
      done_ = true;
    }
    finished_.notify_all();
  }

 private:
  std::weak_ptr<State> state_;
  mutable std::mutex mu_;
  std::condition_variable finished_;
  bool done_ = false;
  absl::Status status_;
  // Written only by whoever runs the op (one thread at a time, handed over
  // under the queue's mutex), published to times_ at Complete.
  WorkTimes running_times_;
  WorkTimes times_;
};

void CollectiveQueue::State::Execute(Entry& entry) {
  absl::Status status;
  bool broken;
  {
    std::lock_guard<std::mutex> lock(mu);
    broken = !first_error.ok();
    if (broken) status = BrokenError();
  }
  std::shared_ptr<PendingWork> work = std::move(entry.work);
  work->running_times().started = std::chrono::steady_clock::now();
  if (!broken) status = entry.op(entry.sequence, work->running_times());
  const int lane = LaneOf(entry);
  entry = Entry();  // drop the op and what it captured
  {
    // Completing under mu makes "running == 0" imply "completed" for
    // Shutdown, and lets the caller's next op run inline at once. Nothing
    // takes mu while holding a Work's lock, so this cannot deadlock.
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok() && first_error.ok()) first_error = status;
    --running;
    if (lanes > 0) lane_busy[lane] = false;
    work->Complete(std::move(status));
  }
  changed.notify_all();
}

void CollectiveQueue::State::WorkerLoop() {
  for (;;) {
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mu);
      std::deque<Entry>::iterator next;
      changed.wait(lock, [&] { return stopping || (next = NextStartable()) != pending.end(); });
      if (stopping) return;  // Shutdown fails what is still pending
      Take(next, entry);
    }
    Execute(entry);
  }
}

void CollectiveQueue::State::RunInlineIfNext(const PendingWork* work) {
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return;
    const auto next = NextStartable();
    if (next == pending.end() || next->work.get() != work) return;
    Take(next, entry);
  }
  Execute(entry);
}

CollectiveQueue::CollectiveQueue(int threads) : CollectiveQueue(threads, 0) {}

std::unique_ptr<CollectiveQueue> CollectiveQueue::Lanes(int lanes) {
  lanes = std::max(lanes, 1);
  return std::unique_ptr<CollectiveQueue>(new CollectiveQueue(lanes, lanes == 1 ? 0 : lanes));
}

CollectiveQueue::CollectiveQueue(int threads, int lanes)
    : state_(std::make_shared<State>(threads < 1 ? 1 : threads, lanes)) {
  for (int i = 0; i < state_->concurrency; ++i) threads_.emplace_back([state = state_] { state->WorkerLoop(); });
}

CollectiveQueue::~CollectiveQueue() { Shutdown(); }

std::shared_ptr<Work> CollectiveQueue::Submit(std::string what, Op op) {
  return Submit(std::move(what), TimedOp([op = std::move(op)](uint64_t sequence, WorkTimes&) { return op(sequence); }));
}

std::shared_ptr<Work> CollectiveQueue::Submit(std::string what, TimedOp op) {
  auto work = std::make_shared<PendingWork>(state_);
  work->running_times().queued = std::chrono::steady_clock::now();
  absl::Status rejected;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->first_error.ok()) {
      rejected = state_->BrokenError();
    } else if (state_->stopping) {
      rejected = absl::AbortedError(absl::StrCat(what, ": communicator is shut down"));
    } else {
      state_->pending.push_back(State::Entry{std::move(what), std::move(op), state_->next_sequence++, work});
    }
  }
  if (!rejected.ok()) {
    work->Complete(std::move(rejected));
  } else {
    state_->changed.notify_all();
  }
  return work;
}

void CollectiveQueue::Shutdown() {
  std::deque<State::Entry> never_started;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
    never_started.swap(state_->pending);
  }
  state_->changed.notify_all();
  for (State::Entry& entry : never_started) {
    entry.work->Complete(
        absl::AbortedError(absl::StrCat(entry.what, ": communicator was destroyed before the op ran")));
  }
  for (std::thread& thread : threads_) thread.join();
  // A caller may still be running an op inline.
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->changed.wait(lock, [&] { return state_->running == 0; });
}

absl::Status CollectiveQueue::first_error() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->first_error;
}

}  // namespace herd
