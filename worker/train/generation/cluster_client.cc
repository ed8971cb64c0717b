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
    auto context = NewCallContext(client_->options().token, client_->options().rpc_timeout);
    return FromGrpcStatus(client_->stub()->KvSet(context.get(), request, &response));
  }

  absl::Status Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override {
    v1::KvGetRequest request;
    request.set_job_id(client_->options().job_id);
    request.set_generation(generation_);
    request.set_key(key);
    request.set_wait_ms(timeout.count());
    v1::KvGetResponse response;
    // The server waits up to `timeout`; give the call itself a margin on top.
    auto context = NewCallContext(client_->options().token, timeout + client_->options().rpc_timeout);
    absl::Status status = FromGrpcStatus(client_->stub()->KvGet(context.get(), request, &response));
    if (status.ok()) *value = response.value();
    return status;
  }

 private:
  ClusterClient* client_;
  int64_t generation_;
};

}  // namespace

ClusterClient::ClusterClient(std::shared_ptr<grpc::Channel> channel, ClusterClientOptions options)
    : stub_(v1::ClusterService::NewStub(channel)), options_(std::move(options)) {}

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
  auto context = NewCallContext(options_.token, wait + options_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->JoinGeneration(context.get(), request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ReportProgressResponse> ClusterClient::ReportProgress(const v1::ReportProgressRequest& request) {
  v1::ReportProgressResponse response;
  auto context = NewCallContext(options_.token, options_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->ReportProgress(context.get(), request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::CommitCheckpointResponse> ClusterClient::CommitCheckpoint(
    const v1::CommitCheckpointRequest& request) {
  v1::CommitCheckpointResponse response;
  auto context = NewCallContext(options_.token, options_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->CommitCheckpoint(context.get(), request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::Status ClusterClient::ReportFailure(const v1::ReportFailureRequest& request) {
  v1::ReportFailureResponse response;
  auto context = NewCallContext(options_.token, options_.rpc_timeout);
  return FromGrpcStatus(stub_->ReportFailure(context.get(), request, &response));
}

std::shared_ptr<RendezvousStore> ClusterClient::KvStore(int64_t generation) {
  return std::make_shared<CoordinatorKvStore>(this, generation);
}

}  // namespace herd
