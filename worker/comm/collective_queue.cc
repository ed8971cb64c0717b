#include "worker/comm/collective_queue.h"

#include <condition_variable>
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

  explicit State(int concurrency) : concurrency(concurrency) {}

  absl::Status BrokenError() const {  // requires mu
    absl::Status broken = absl::AbortedError(
        absl::StrCat("communicator is broken by an earlier failure: ",
                     absl::StatusCodeToString(first_error.code()), ": ", first_error.message()));
    // What the first failure blames (worker/comm/peer_fault.h) stays with it.
    first_error.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { broken.SetPayload(url, payload); });
    return broken;
  }

  // Pops the head if it may start now; requires mu.
  bool TakeHead(Entry& entry) {
    if (pending.empty() || running >= concurrency) return false;
    entry = std::move(pending.front());
    pending.pop_front();
    ++running;
    return true;
  }

  // Runs an entry taken by TakeHead, on a worker or a waiting caller.
  void Execute(Entry& entry);
  void WorkerLoop();
  // Called by Wait(): runs `work` here if it is next and may start now.
  void RunInlineIfNext(const PendingWork* work);

  const int concurrency;
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
  entry = Entry();  // drop the op and what it captured
  {
    // Completing under mu makes "running == 0" imply "completed" for
    // Shutdown, and lets the caller's next op run inline at once. Nothing
    // takes mu while holding a Work's lock, so this cannot deadlock.
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok() && first_error.ok()) first_error = status;
    --running;
    work->Complete(std::move(status));
  }
  changed.notify_all();
}

void CollectiveQueue::State::WorkerLoop() {
  for (;;) {
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock, [&] { return stopping || (!pending.empty() && running < concurrency); });
      if (!TakeHead(entry)) return;  // stopping, and Shutdown emptied the queue
    }
    Execute(entry);
  }
}

void CollectiveQueue::State::RunInlineIfNext(const PendingWork* work) {
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping || pending.empty() || pending.front().work.get() != work) return;
    if (!TakeHead(entry)) return;
  }
  Execute(entry);
}

CollectiveQueue::CollectiveQueue(int threads) : state_(std::make_shared<State>(threads < 1 ? 1 : threads)) {
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
