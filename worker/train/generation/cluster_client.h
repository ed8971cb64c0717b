// The trainer's side of the ClusterService over gRPC: the CoordinatorLink
// a real trainer uses.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/leader_channel.h"
#include "proto/herd.grpc.pb.h"
#include "worker/comm/communicator.h"
#include "worker/train/generation/coordinator_link.h"

namespace herd {

struct ClusterClientOptions {
  std::string job_id;
  std::string worker_id;
  std::string token;
  std::chrono::milliseconds rpc_timeout{10000};
};

class ClusterClient : public CoordinatorLink {
 public:
  // Calls go to the leader among the coordinator's addresses.
  ClusterClient(std::shared_ptr<LeaderChannel> coordinator, ClusterClientOptions options);
  ClusterClient(std::shared_ptr<grpc::Channel> channel, ClusterClientOptions options)
      : ClusterClient(LeaderChannel::Over(std::move(channel)), std::move(options)) {}

  const std::string& job_id() const override { return options_.job_id; }
  const std::string& worker_id() const override { return options_.worker_id; }
  absl::StatusOr<v1::JoinGenerationResponse> JoinGeneration(std::chrono::milliseconds wait,
                                                            int64_t after_generation = 0,
                                                            bool at_boundary = false) override;
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& request) override;
  absl::StatusOr<v1::CommitCheckpointResponse> CommitCheckpoint(const v1::CommitCheckpointRequest& request) override;
  absl::Status ReportFailure(const v1::ReportFailureRequest& request) override;
  // A RendezvousStore over the coordinator's KV, scoped to one generation.
  std::shared_ptr<RendezvousStore> KvStore(int64_t generation) override;

  const ClusterClientOptions& options() const { return options_; }
  // Runs one ClusterService call on the leader, `timeout` each try.
  using Rpc = std::function<grpc::Status(v1::ClusterService::Stub&, grpc::ClientContext*)>;
  grpc::Status Call(std::chrono::milliseconds timeout, const Rpc& rpc);

 private:
  std::shared_ptr<LeaderChannel> coordinator_;
  ClusterClientOptions options_;
};

}  // namespace herd
