#include "coordinator/job_service.h"

#include "absl/strings/str_cat.h"
#include "coordinator/job_watch_stream.h"
#include "coordinator/log_read_stream.h"
#include "coordinator/model_fetch.h"

namespace herd::coordinator {
namespace {

// Sends `session`'s chunks to `writer` as they come, the first naming
// `worker`, until the upload ends (its status), the reader goes away or
// cancels (CANCELLED; `reader` says whose: "model"). `*sent` is set once a
// chunk went out.
template <typename Chunk>
absl::Status RelayChunks(LogSession& session, const std::string& worker, absl::Duration poll,
                         grpc::ServerContext& context, grpc::ServerWriter<Chunk>& writer, const char* reader,
                         bool* sent) {
  while (true) {
    LogSession::Item item = session.Next(poll);
    if (item.data) {
      Chunk chunk;
      chunk.set_data(std::move(*item.data));
      if (!*sent) chunk.set_worker_id(worker);
      *sent = true;
      if (!writer.Write(chunk)) return absl::CancelledError(absl::StrCat("the ", reader, " reader went away"));
    } else if (item.end) {
      return *item.end;
    }
    if (context.IsCancelled()) return absl::CancelledError(absl::StrCat("the ", reader, " reader cancelled"));
  }
}

// Users change only their own jobs; admins any.
absl::Status CheckMayChange(const Principal& caller, const v1::JobInfo& job) {
  if (caller.role == Role::kAdmin || job.owner() == caller.name) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("job ", job.id(), " belongs to '", job.owner(), "'; '",
                                                  caller.name, "' may change only their own jobs"));
}

// Logs may show the job's data: only its owner or an admin reads them.
absl::Status CheckMayReadLogs(const Principal& caller, const v1::JobInfo& job) {
  if (caller.role == Role::kAdmin || job.owner() == caller.name) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("job ", job.id(), " belongs to '", job.owner(), "'; '",
                                                  caller.name, "' may read only their own jobs' logs"));
}

// The trained model is the owner's work (and may reveal the job's data): only
// its owner or an admin fetches it.
absl::Status CheckMayFetchModel(const Principal& caller, const v1::JobInfo& job) {
  if (caller.role == Role::kAdmin || job.owner() == caller.name) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("job ", job.id(), " belongs to '", job.owner(), "'; '",
                                                  caller.name, "' may fetch only their own jobs' models"));
}

// The worker at `rank` of the job's current (or last) generation.
absl::StatusOr<std::string> WorkerAtRank(const v1::JobInfo& job, int64_t rank) {
  if (job.workers().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " has no workers yet (", JobState_Name(job.state()),
                                                      "): no trainer has written a log"));
  }
  if (rank < 0 || rank >= job.workers_size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": job ", job.id(), " has ranks 0 to ",
                                                   job.workers_size() - 1, " in generation ", job.generation()));
  }
  return job.workers(static_cast<int>(rank));
}

// Operator commands on workers.
absl::Status CheckAdmin(const Principal& caller, const std::string& what) {
  if (caller.role == Role::kAdmin) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(what, " needs the admin role; '", caller.name, "' is a ", RoleName(caller.role)));
}

}  // namespace

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  return edge_->Handle("SubmitJob", Api::kJobs, *context, [&](const Principal& caller) {
    absl::Status status = AssignTo(coordinator_->SubmitJob(request->spec(), caller.name), response->mutable_job());
    edge_->Audit("submit", caller.name, status.ok() ? response->job().id() : "job refused", status);
    return status;
  });
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                    v1::GetJobResponse* response) {
  return edge_->Handle("GetJob", Api::kJobs, *context,
                       [&](const Principal&) { return AssignTo(coordinator_->GetJob(request->id()), response->mutable_job()); });
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  return edge_->Handle("ListJobs", Api::kJobs, *context, [&](const Principal&) -> absl::Status {
    for (v1::JobInfo& job : coordinator_->ListJobs()) *response->add_jobs() = std::move(job);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse* response) {
  return edge_->Handle("CancelJob", Api::kJobs, *context, [&](const Principal& caller) {
    auto job = coordinator_->GetJob(request->id());
    absl::Status status = job.ok() ? CheckMayChange(caller, *job) : job.status();
    if (status.ok()) status = AssignTo(coordinator_->CancelJob(request->id()), response->mutable_job());
    edge_->Audit(absl::IsPermissionDenied(status) ? "permission_denied" : "cancel", caller.name,
                 absl::StrCat("cancel ", request->id()), status);
    return status;
  });
}

grpc::Status JobServiceImpl::ResizeJob(grpc::ServerContext* context, const v1::ResizeJobRequest* request,
                                       v1::ResizeJobResponse* response) {
  return edge_->Handle("ResizeJob", Api::kJobs, *context, [&](const Principal& caller) {
    auto job = coordinator_->GetJob(request->id());
    absl::Status status = job.ok() ? CheckMayChange(caller, *job) : job.status();
    if (status.ok()) {
      status = AssignTo(coordinator_->ResizeJob(request->id(), request->min_workers(), request->max_workers()),
                        response->mutable_job());
    }
    edge_->Audit(absl::IsPermissionDenied(status) ? "permission_denied" : "resize", caller.name,
                 absl::StrCat("resize ", request->id(), " to ", request->min_workers(), "-", request->max_workers()),
                 status);
    return status;
  });
}

grpc::Status JobServiceImpl::SetJobPriority(grpc::ServerContext* context, const v1::SetJobPriorityRequest* request,
                                            v1::SetJobPriorityResponse* response) {
  return edge_->Handle("SetJobPriority", Api::kJobs, *context, [&](const Principal& caller) {
    auto job = coordinator_->GetJob(request->id());
    absl::Status status = job.ok() ? CheckMayChange(caller, *job) : job.status();
    if (status.ok()) {
      status = AssignTo(coordinator_->SetJobPriority(request->id(), request->priority()), response->mutable_job());
    }
    edge_->Audit(absl::IsPermissionDenied(status) ? "permission_denied" : "priority", caller.name,
                 absl::StrCat("priority ", request->id(), " ", request->priority()), status);
    return status;
  });
}

grpc::ServerWriteReactor<v1::WatchJobEvent>* JobServiceImpl::WatchJob(grpc::CallbackServerContext* context,
                                                                      const v1::WatchJobRequest* request) {
  std::shared_ptr<JobWatchStream> stream =
      JobWatchStream::Open(coordinator_, edge_->CountOpenStream(StreamKind::kJobWatch));
  edge_->HandleLater(
      "WatchJob", Api::kJobs, *context,
      [&](const Principal&, RpcEdge::Answer answer) {
        stream->Begin(std::move(answer));
        auto watch = coordinator_->WatchJob(request->id(), stream);
        if (!watch.ok()) {
          stream->End(watch.status());
          return;
        }
        stream->Watching(*watch);
      },
      [stream = stream.get()](grpc::Status status) { stream->FinishWhenWritten(std::move(status)); });
  return stream.get();
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                                         v1::ListWorkersResponse* response) {
  return edge_->Handle("ListWorkers", Api::kJobs, *context, [&](const Principal&) -> absl::Status {
    for (v1::WorkerInfo& worker : coordinator_->ListWorkers()) *response->add_workers() = std::move(worker);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::ListCheckpoints(grpc::ServerContext* context, const v1::ListCheckpointsRequest* request,
                                             v1::ListCheckpointsResponse* response) {
  return edge_->Handle("ListCheckpoints", Api::kJobs, *context, [&](const Principal&) -> absl::Status {
    auto checkpoints = coordinator_->ListCheckpoints(request->job_id());
    if (!checkpoints.ok()) return checkpoints.status();
    for (v1::CheckpointInfo& checkpoint : *checkpoints) *response->add_checkpoints() = std::move(checkpoint);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::LogChunk>* JobServiceImpl::GetJobLogs(grpc::CallbackServerContext* context,
                                                                  const v1::GetJobLogsRequest* request) {
  std::shared_ptr<LogReadStream> stream = LogReadStream::Open(logs_, edge_->CountOpenStream(StreamKind::kJobLogs));
  edge_->HandleLater(
      "GetJobLogs", Api::kJobs, *context,
      [&](const Principal& caller, RpcEdge::Answer answer) {
        stream->Begin(std::move(answer));
        auto session = OpenLogSession(caller, *request);
        if (!session.ok()) {
          stream->End(session.status());
          return;
        }
        stream->Relay(std::move(session->first), std::move(session->second));
      },
      [stream = stream.get()](grpc::Status status) { stream->FinishWhenWritten(std::move(status)); });
  return stream.get();
}

absl::StatusOr<std::pair<std::shared_ptr<LogSession>, std::string>> JobServiceImpl::OpenLogSession(
    const Principal& caller, const v1::GetJobLogsRequest& request) {
  if (request.tail_lines() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tail_lines: ", request.tail_lines(), " is negative"));
  }
  auto job = coordinator_->GetJob(request.job_id());
  if (!job.ok()) return job.status();
  if (auto status = CheckMayReadLogs(caller, *job); !status.ok()) {
    edge_->Audit("permission_denied", caller.name, absl::StrCat("logs of ", request.job_id()), status);
    return status;
  }
  auto worker = WorkerAtRank(*job, request.rank());
  if (!worker.ok()) return worker.status();
  v1::LogRequest ask;
  ask.set_job_id(request.job_id());
  ask.set_follow(request.follow());
  ask.set_tail_lines(request.tail_lines());
  auto session = logs_->Open(*worker, std::move(ask));
  if (!session.ok()) return session.status();
  return std::make_pair(*std::move(session), *std::move(worker));
}

grpc::Status JobServiceImpl::FetchModelFile(grpc::ServerContext* context, const v1::FetchModelFileRequest* request,
                                            grpc::ServerWriter<v1::FileChunk>* writer) {
  const Metrics::OpenStreamCount counted = edge_->CountOpenStream(StreamKind::kModelFetch);
  return edge_->Handle("FetchModelFile", Api::kJobs, *context, [&](const Principal& caller) -> absl::Status {
    auto job = coordinator_->GetJob(request->job_id());
    if (!job.ok()) return job.status();
    if (auto status = CheckMayFetchModel(caller, *job); !status.ok()) {
      edge_->Audit("permission_denied", caller.name, absl::StrCat("model of ", request->job_id()), status);
      return status;
    }
    std::vector<v1::CheckpointInfo> checkpoints;
    if (request->checkpoint_step() > 0) {
      auto listed = coordinator_->ListCheckpoints(request->job_id());
      if (!listed.ok()) return listed.status();
      checkpoints = *std::move(listed);
    }
    auto plan = PlanModelFetch(*request, *job, checkpoints, coordinator_->ListWorkers());
    if (!plan.ok()) return plan.status();
    // Each worker in turn until one sends the file: one that lacks it (or is
    // not connected) answers before any data, and the next is asked.
    std::vector<std::string> answers;
    for (const std::string& worker : plan->workers) {
      // Stopping (UNAVAILABLE) says nothing of whether the next one holds it.
      auto session = logs_->Open(worker, plan->ask);
      if (!session.ok()) {
        if (logs_->IsShutDown()) return session.status();
        answers.push_back(std::string(session.status().message()));  // names the worker
        continue;
      }
      bool sent = false;
      absl::Status end = RelayChunks(**session, worker, options_.watch_poll, *context, *writer, "model", &sent);
      logs_->Close(*session);
      if (sent || end.ok() || absl::IsCancelled(end) || logs_->IsShutDown()) return end;
      answers.push_back(std::string(end.message()));  // names the worker
    }
    return NoWorkerHolds(*plan, answers);
  });
}

grpc::Status JobServiceImpl::CordonWorker(grpc::ServerContext* context, const v1::CordonWorkerRequest* request,
                                          v1::CordonWorkerResponse* response) {
  return edge_->Handle("CordonWorker", Api::kJobs, *context, [&](const Principal& caller) {
    const std::string what = absl::StrCat(request->cordoned() ? "cordon " : "uncordon ", request->worker_id());
    absl::Status status = CheckAdmin(caller, what);
    if (status.ok()) {
      status = AssignTo(coordinator_->CordonWorker(request->worker_id(), request->cordoned()), response->mutable_worker());
    }
    edge_->Audit(absl::IsPermissionDenied(status) ? "permission_denied" : (request->cordoned() ? "cordon" : "uncordon"),
                 caller.name, what, status);
    return status;
  });
}

grpc::Status JobServiceImpl::DrainWorker(grpc::ServerContext* context, const v1::DrainWorkerRequest* request,
                                         v1::DrainWorkerResponse* response) {
  return edge_->Handle("DrainWorker", Api::kJobs, *context, [&](const Principal& caller) {
    const std::string what = absl::StrCat("drain ", request->worker_id());
    absl::Status status = CheckAdmin(caller, what);
    if (status.ok()) status = AssignTo(coordinator_->DrainWorker(request->worker_id()), response);
    edge_->Audit(absl::IsPermissionDenied(status) ? "permission_denied" : "drain", caller.name, what, status);
    return status;
  });
}

}  // namespace herd::coordinator
