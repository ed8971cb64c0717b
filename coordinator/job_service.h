// JobService: the client-facing API (submit, inspect, watch, cancel, resize,
// reprioritize).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "coordinator/log_relay.h"
#include "coordinator/rpc_edge.h"
#include "proto/herd.grpc.pb.h"

namespace herd::coordinator {

struct JobServiceOptions {
  // How often FetchModelFile looks for a cancelled reader while no chunk
  // comes.
  absl::Duration watch_poll = absl::Milliseconds(500);
};

// WatchJob and GetJobLogs are callback methods: a watcher waiting for the
// job's next change and a reader waiting for a followed log's next lines
// hold no server thread. The rest is synchronous; FetchModelFile holds one
// while it relays (see docs/design.md).
class JobServiceImpl final
    : public v1::JobService::WithCallbackMethod_WatchJob<
          v1::JobService::WithCallbackMethod_GetJobLogs<v1::JobService::Service>> {
 public:
  JobServiceImpl(Coordinator* coordinator, const RpcEdge* edge, LogRelay* logs, JobServiceOptions options = {})
      : coordinator_(coordinator), edge_(edge), logs_(logs), options_(options) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status ResizeJob(grpc::ServerContext* context, const v1::ResizeJobRequest* request,
                         v1::ResizeJobResponse* response) override;
  grpc::Status SetJobPriority(grpc::ServerContext* context, const v1::SetJobPriorityRequest* request,
                              v1::SetJobPriorityResponse* response) override;
  // Sends the job now, then once per change; ends after a final state.
  grpc::ServerWriteReactor<v1::WatchJobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                        const v1::WatchJobRequest* request) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* context, const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override;
  // Relays the log of the trainer at a rank from its worker's daemon.
  grpc::ServerWriteReactor<v1::LogChunk>* GetJobLogs(grpc::CallbackServerContext* context,
                                                     const v1::GetJobLogsRequest* request) override;
  // A file of the job's final model or of a recorded checkpoint, relayed from
  // the first worker that holds it (see PlanModelFetch).
  grpc::Status FetchModelFile(grpc::ServerContext* context, const v1::FetchModelFileRequest* request,
                              grpc::ServerWriter<v1::FileChunk>* writer) override;
  // Admin role only.
  grpc::Status CordonWorker(grpc::ServerContext* context, const v1::CordonWorkerRequest* request,
                            v1::CordonWorkerResponse* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context, const v1::DrainWorkerRequest* request,
                           v1::DrainWorkerResponse* response) override;

 private:
  // GetJobLogs' checks and its session with the worker at the rank; the
  // session and that worker.
  absl::StatusOr<std::pair<std::shared_ptr<LogSession>, std::string>> OpenLogSession(
      const Principal& caller, const v1::GetJobLogsRequest& request);

  Coordinator* const coordinator_;
  const RpcEdge* const edge_;
  LogRelay* const logs_;
  const JobServiceOptions options_;
};

}  // namespace herd::coordinator
