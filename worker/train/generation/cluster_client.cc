#include "worker/train/generation/cluster_client.h"

#include "common/rpc_options.h"
#include "common/status_convert.h"

namespace herd {
namespace {

class CoordinatorKvStore : public RendezvousStore {
 public:
  CoordinatorKvStore(ClusterClient* client, int64_t generation) : client_(client), generation_(generation) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    v1::KvSetRequest request;
    request.set_job_id(client_->options().job_id);
    request.set_generation(generation_);
    request.set_key(key);
    request.set_value(value);
    v1::KvSetResponse response;
    return FromGrpcStatus(client_->Call(client_->options().rpc_timeout, [&](auto& stub, auto* context) {
      return stub.KvSet(context, request, &response);
    }));
  }

  absl::Status Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override {
    v1::KvGetRequest request;
    request.set_job_id(client_->options().job_id);
    request.set_generation(generation_);
    request.set_key(key);
    request.set_wait_ms(timeout.count());
    v1::KvGetResponse response;
    // The server waits up to `timeout`; give the call itself a margin on top.
    absl::Status status =
        FromGrpcStatus(client_->Call(timeout + client_->options().rpc_timeout, [&](auto& stub, auto* context) {
          return stub.KvGet(context, request, &response);
        }));
    if (status.ok()) *value = response.value();
    return status;
  }

 private:
  ClusterClient* client_;
  int64_t generation_;
};

}  // namespace

ClusterClient::ClusterClient(std::shared_ptr<LeaderChannel> coordinator, ClusterClientOptions options)
    : coordinator_(std::move(coordinator)), options_(std::move(options)) {}

grpc::Status ClusterClient::Call(std::chrono::milliseconds timeout, const Rpc& rpc) {
  // One pass over the addresses (a follower's hint followed at once); the
  // trainer's own retries wait between passes.
  return coordinator_->Call([&] { return NewCallContext(options_.token, timeout); },
                            [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context) {
                              auto stub = v1::ClusterService::NewStub(channel);
                              return rpc(*stub, context);
                            });
}

absl::StatusOr<v1::JoinGenerationResponse> ClusterClient::JoinGeneration(std::chrono::milliseconds wait,
                                                                         int64_t after_generation,
                                                                         bool at_boundary) {
  v1::JoinGenerationRequest request;
  request.set_after_generation(after_generation);
  request.set_at_boundary(at_boundary);
  request.set_job_id(options_.job_id);
  request.set_worker_id(options_.worker_id);
  request.set_wait_ms(wait.count());
  v1::JoinGenerationResponse response;
  absl::Status status = FromGrpcStatus(Call(wait + options_.rpc_timeout, [&](auto& stub, auto* context) {
    return stub.JoinGeneration(context, request, &response);
  }));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ReportProgressResponse> ClusterClient::ReportProgress(const v1::ReportProgressRequest& request) {
  v1::ReportProgressResponse response;
  absl::Status status = FromGrpcStatus(Call(options_.rpc_timeout, [&](auto& stub, auto* context) {
    return stub.ReportProgress(context, request, &response);
  }));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::CommitCheckpointResponse> ClusterClient::CommitCheckpoint(
    const v1::CommitCheckpointRequest& request) {
  v1::CommitCheckpointResponse response;
  absl::Status status = FromGrpcStatus(Call(options_.rpc_timeout, [&](auto& stub, auto* context) {
    return stub.CommitCheckpoint(context, request, &response);
  }));
  if (!status.ok()) return status;
  return response;
}

absl::Status ClusterClient::ReportFailure(const v1::ReportFailureRequest& request) {
  v1::ReportFailureResponse response;
  return FromGrpcStatus(Call(options_.rpc_timeout, [&](auto& stub, auto* context) {
    return stub.ReportFailure(context, request, &response);
  }));
}

std::shared_ptr<RendezvousStore> ClusterClient::KvStore(int64_t generation) {
  return std::make_shared<CoordinatorKvStore>(this, generation);
}

}  // namespace herd
