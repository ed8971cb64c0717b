// Tests only: a store whose writes a test can hold open (etcd's round trip,
// an fsync that does not return), around a real store.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/state_store.h"

namespace herd::coordinator {

// Where the store's writes wait while the test holds them.
class Gate {
 public:
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    closed_ = false;
  }
  // Waits until a write waits at the closed gate; false past `within`.
  bool AwaitHeld(absl::Duration within = absl::Seconds(30)) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(this, &Gate::Holds), within);
  }
  // The store's side, around each write; `what` names it in the log.
  void Enter(const std::string& what) {
    absl::MutexLock lock(&mu_);
    log_.push_back("enter " + what);
    ++waiting_;
    mu_.Await(absl::Condition(
        +[](bool* closed) { return !*closed; }, &closed_));
    --waiting_;
  }
  void Leave(const std::string& what) {
    absl::MutexLock lock(&mu_);
    log_.push_back("leave " + what);
  }
  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

 private:
  bool Holds() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ && waiting_ > 0; }

  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

// A real SQLite store whose writes pass the gate.
class GatedStore : public StateStore {
 public:
  GatedStore(std::unique_ptr<StateStore> store, Gate* gate) : store_(std::move(store)), gate_(gate) {}

  absl::StatusOr<ClusterState> Load(double now) override { return store_->Load(now); }

  absl::Status Write(const StateWrite& records, const std::function<void()>& committed) override {
    std::vector<std::string> names;
    for (const JobRecord& job : records.jobs) names.push_back(job.info.id());
    for (const WorkerRecord& worker : records.workers) names.push_back(worker.id);
    const std::string what = absl::StrJoin(names, ",");
    gate_->Enter(what);
    absl::Status status = store_->Write(records, committed);
    gate_->Leave(what);
    return status;
  }

  absl::Status SaveCheckpoint(const v1::CheckpointInfo& added,
                              const std::vector<v1::CheckpointInfo>& dropped) override {
    const std::string what = "checkpoint at step " + std::to_string(added.step());
    gate_->Enter(what);
    absl::Status status = store_->SaveCheckpoint(added, dropped);
    gate_->Leave(what);
    return status;
  }

 private:
  const std::unique_ptr<StateStore> store_;
  Gate* const gate_;
};

}  // namespace herd::coordinator
