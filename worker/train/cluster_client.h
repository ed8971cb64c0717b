// The trainer's side of the ClusterService: joining a generation, the
// key-value store used for collective bootstrap, and progress reports.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/herd.grpc.pb.h"
#include "worker/comm/communicator.h"

namespace herd {

struct ClusterClientOptions {
  std::string job_id;
  std::string worker_id;
  std::string token;
  std::chrono::milliseconds rpc_timeout{10000};
};

class ClusterClient {
 public:
  ClusterClient(std::shared_ptr<grpc::Channel> channel, ClusterClientOptions options);

  // Waits up to `wait` for this worker's place in the job's current generation.
  absl::StatusOr<v1::JoinGenerationResponse> JoinGeneration(std::chrono::milliseconds wait);
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& request);
  absl::StatusOr<v1::CommitCheckpointResponse> CommitCheckpoint(const v1::CommitCheckpointRequest& request);
  absl::Status ReportFailure(const v1::ReportFailureRequest& request);

  // A RendezvousStore over the coordinator's KV, scoped to one generation.
  std::shared_ptr<RendezvousStore> KvStore(int64_t generation);

  const ClusterClientOptions& options() const { return options_; }
  v1::ClusterService::Stub* stub() { return stub_.get(); }

 private:
  std::unique_ptr<v1::ClusterService::Stub> stub_;
  ClusterClientOptions options_;
};

}  // namespace herd
