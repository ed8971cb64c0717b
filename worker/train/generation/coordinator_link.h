// What a trainer needs from the coordinator, as an interface: joining a
// generation, reporting progress, failures and checkpoints, and the
// generation's rendezvous store. ClusterClient (cluster_client.h) speaks it
// over gRPC; tests drive whole trainers in one process with an in-memory
// coordinator (worker/train/testing/in_process_coordinator.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"

namespace herd {

class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;

  virtual const std::string& job_id() const = 0;
  virtual const std::string& worker_id() const = 0;

  // Waits up to `wait` for this worker's place in the job's current
  // generation, one newer than `after_generation`; DEADLINE_EXCEEDED while it
  // is not a member of one. `at_boundary`: the ranks ended `after_generation`
  // together at a step boundary the coordinator asked for, to re-form
  // (JoinGenerationRequest.at_boundary).
  virtual absl::StatusOr<v1::JoinGenerationResponse> JoinGeneration(std::chrono::milliseconds wait,
                                                                    int64_t after_generation = 0,
                                                                    bool at_boundary = false) = 0;
  virtual absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& request) = 0;
  virtual absl::StatusOr<v1::CommitCheckpointResponse> CommitCheckpoint(const v1::CommitCheckpointRequest& request) = 0;
  // FAILED_PRECONDITION: the generation is already replaced.
  virtual absl::Status ReportFailure(const v1::ReportFailureRequest& request) = 0;
  // The rendezvous store of one generation (collective bootstrap).
  virtual std::shared_ptr<RendezvousStore> KvStore(int64_t generation) = 0;
};

}  // namespace herd
