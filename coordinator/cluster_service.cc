#include "coordinator/cluster_service.h"

namespace herd::coordinator {
namespace {

CancelledFn CallerGone(grpc::ServerContext* context) {
  return [context] { return context->IsCancelled(); };
}

}  // namespace

grpc::Status ClusterServiceImpl::RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                                                v1::RegisterWorkerResponse* response) {
  return edge_->Handle("RegisterWorker", *context,
                       [&] { return AssignTo(coordinator_->RegisterWorker(*request), response); });
}

grpc::Status ClusterServiceImpl::Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse* response) {
  return edge_->Handle("Heartbeat", *context, [&] { return AssignTo(coordinator_->Heartbeat(*request), response); });
}

grpc::Status ClusterServiceImpl::JoinGeneration(grpc::ServerContext* context, const v1::JoinGenerationRequest* request,
                                                v1::JoinGenerationResponse* response) {
  return edge_->Handle("JoinGeneration", *context,
                       [&] { return AssignTo(coordinator_->JoinGeneration(*request, CallerGone(context)), response); });
}

grpc::Status ClusterServiceImpl::KvSet(grpc::ServerContext* context, const v1::KvSetRequest* request,
                                       v1::KvSetResponse* response) {
  return edge_->Handle("KvSet", *context, [&] { return coordinator_->KvSet(*request); });
}

grpc::Status ClusterServiceImpl::KvGet(grpc::ServerContext* context, const v1::KvGetRequest* request,
                                       v1::KvGetResponse* response) {
  return edge_->Handle("KvGet", *context, [&] {
    return AssignTo(coordinator_->KvGet(*request, CallerGone(context)), response->mutable_value());
  });
}

grpc::Status ClusterServiceImpl::KvAdd(grpc::ServerContext* context, const v1::KvAddRequest* request,
                                       v1::KvAddResponse* response) {
  return edge_->Handle("KvAdd", *context, [&]() -> absl::Status {
    auto value = coordinator_->KvAdd(*request);
    if (!value.ok()) return value.status();
    response->set_value(*value);
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::ReportProgress(grpc::ServerContext* context, const v1::ReportProgressRequest* request,
                                                v1::ReportProgressResponse* response) {
  return edge_->Handle("ReportProgress", *context,
                       [&] { return AssignTo(coordinator_->ReportProgress(*request), response); });
}

grpc::Status ClusterServiceImpl::CommitCheckpoint(grpc::ServerContext* context,
                                                  const v1::CommitCheckpointRequest* request,
                                                  v1::CommitCheckpointResponse* response) {
  return edge_->Handle("CommitCheckpoint", *context,
                       [&] { return AssignTo(coordinator_->CommitCheckpoint(*request), response); });
}

grpc::Status ClusterServiceImpl::ReportFailure(grpc::ServerContext* context, const v1::ReportFailureRequest* request,
                                               v1::ReportFailureResponse* response) {
  return edge_->Handle("ReportFailure", *context, [&] { return coordinator_->ReportFailure(*request); });
}

}  // namespace herd::coordinator
