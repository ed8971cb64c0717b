#include "coordinator/job_service.h"

namespace herd::coordinator {

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  return edge_->Handle("SubmitJob", *context,
                       [&] { return AssignTo(coordinator_->SubmitJob(request->spec()), response->mutable_job()); });
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                    v1::GetJobResponse* response) {
  return edge_->Handle("GetJob", *context,
                       [&] { return AssignTo(coordinator_->GetJob(request->id()), response->mutable_job()); });
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  return edge_->Handle("ListJobs", *context, [&]() -> absl::Status {
    for (v1::JobInfo& job : coordinator_->ListJobs()) *response->add_jobs() = std::move(job);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse* response) {
  return edge_->Handle("CancelJob", *context,
                       [&] { return AssignTo(coordinator_->CancelJob(request->id()), response->mutable_job()); });
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                      grpc::ServerWriter<v1::WatchJobEvent>* writer) {
  return edge_->Handle("WatchJob", *context, [&]() -> absl::Status {
    int64_t seen_version = -1;  // nothing sent yet: the first snapshot goes out at once
    while (true) {
      auto snapshot = coordinator_->AwaitJobChange(request->id(), seen_version, options_.watch_poll);
      if (!snapshot.ok()) return snapshot.status();
      if (snapshot->version != seen_version) {
        seen_version = snapshot->version;
        v1::WatchJobEvent event;
        *event.mutable_job() = std::move(snapshot->info);
        if (!writer->Write(event)) return absl::CancelledError("the watcher went away");
        if (IsFinal(event.job().state())) return absl::OkStatus();
      }
      if (context->IsCancelled()) return absl::CancelledError("the watcher cancelled");
    }
  });
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                                         v1::ListWorkersResponse* response) {
  return edge_->Handle("ListWorkers", *context, [&]() -> absl::Status {
    for (v1::WorkerInfo& worker : coordinator_->ListWorkers()) *response->add_workers() = std::move(worker);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::ListCheckpoints(grpc::ServerContext* context, const v1::ListCheckpointsRequest* request,
                                             v1::ListCheckpointsResponse* response) {
  return edge_->Handle("ListCheckpoints", *context, [&]() -> absl::Status {
    auto checkpoints = coordinator_->ListCheckpoints(request->job_id());
    if (!checkpoints.ok()) return checkpoints.status();
    for (v1::CheckpointInfo& checkpoint : *checkpoints) *response->add_checkpoints() = std::move(checkpoint);
    return absl::OkStatus();
  });
}

}  // namespace herd::coordinator
