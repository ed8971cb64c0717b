// Tests only: a coordinator for one job held in this process's memory, so
// whole trainers (job context, generations, sync, commits, healing) run as
// threads of a test with no gRPC, no daemon and no files.
//
// Membership is the test's decision: a generation forms from the workers in
// SetMembers() once all of them have joined; a reported failure (or Fence())
// starts the next one, formed the same way. A worker outside the members
// waits in JoinGeneration, as it would for re-admission, until it is added
// back or its wait ends (DEADLINE_EXCEEDED). Every generation gets its own
// in-memory rendezvous store.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/herd.pb.h"
#include "worker/comm/in_memory_store.h"
#include "worker/train/generation/coordinator_link.h"

namespace herd {

class InProcessCoordinator {
 public:
  InProcessCoordinator(std::string job_id, v1::JobSpec spec, uint64_t seed);

  // The workers of the next generation, in rank order.
  void SetMembers(std::vector<std::string> worker_ids);
  // A worker's labels (herd-worker --label), handed to every rank in its
  // generation's Peer.labels as the real coordinator does. The test orders
  // members by island itself (SetMembers).
  void SetLabels(const std::string& worker_id, std::map<std::string, std::string> labels);
  // Supersedes the current generation as the real coordinator's fencing does
  // (a worker joined or left): its members' next report is refused.
  void Fence();
  // The newest complete checkpoint (JOB/step-N under the trainers'
  // checkpoint root) handed to every join, as the real coordinator hands its
  // catalog's newest: ranks holding no commit resume from it.
  void SetCheckpoint(std::string relative_path, int64_t step);

  // The link a trainer thread of `worker_id` talks through; it must not
  // outlive this coordinator.
  std::unique_ptr<CoordinatorLink> Link(const std::string& worker_id);

  int64_t generation() const;
  // Every progress report received, in arrival order.
  std::vector<v1::ReportProgressRequest> reports() const;
  std::vector<v1::ReportFailureRequest> failures() const;

 private:
  class WorkerLink;
  friend class WorkerLink;

  absl::StatusOr<v1::JoinGenerationResponse> Join(const std::string& worker_id, std::chrono::milliseconds wait);
  absl::Status CheckCurrent(int64_t generation) const;  // FAILED_PRECONDITION if superseded
  void StartNextLocked();
  void FormIfCompleteLocked();
  std::shared_ptr<RendezvousStore> Store(int64_t generation);

  const std::string job_id_;
  const v1::JobSpec spec_;
  const uint64_t seed_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> members_;  // of the generation being formed
  int64_t generation_ = 0;            // the newest formed generation (0: none yet)
  std::vector<std::string> formed_members_;
  bool forming_ = true;               // generation_ + 1 is waiting for its members
  std::map<std::string, int64_t> joined_;  // worker -> generation it asked to join
  std::map<int64_t, std::shared_ptr<InMemoryStore>> stores_;
  std::map<std::string, std::map<std::string, std::string>> labels_;
  std::vector<v1::ReportProgressRequest> reports_;
  std::vector<v1::ReportFailureRequest> failures_;
  std::string checkpoint_path_;
  int64_t checkpoint_step_ = 0;
};

}  // namespace herd
