// ClusterService: the worker-facing API (membership, heartbeats, rendezvous,
// KV store, progress, checkpoint commits, failure reports).
#pragma once

#include "coordinator/coordinator.h"
#include "coordinator/log_relay.h"
#include "coordinator/rpc_edge.h"
#include "proto/herd.grpc.pb.h"

namespace herd::coordinator {

// JoinGeneration and KvGet are callback methods: a rank waiting for its
// generation or for a key holds no server thread. JoinGeneration is raw
// (bytes): every rank's answer is the generation's shared answer, sent as
// serialized once (JoinAnswer). Heartbeat is a callback method too
// (docs/design.md: with a mix, synchronous heartbeats stalled): a lease
// renewal is answered inline, one that changes state on a thread of its
// own. WatchLogRequests, which every daemon keeps open, is a callback
// stream: it holds no thread while it waits for a log request; so is
// UploadLog, while it waits for the trainer's next lines or for room in the
// reader's session. The rest of the service is synchronous.
class ClusterServiceImpl final
    : public v1::ClusterService::WithCallbackMethod_Heartbeat<v1::ClusterService::WithRawCallbackMethod_JoinGeneration<
          v1::ClusterService::WithCallbackMethod_KvGet<v1::ClusterService::WithCallbackMethod_WatchLogRequests<
              v1::ClusterService::WithCallbackMethod_UploadLog<v1::ClusterService::Service>>>>> {
 public:
  ClusterServiceImpl(Coordinator* coordinator, const RpcEdge* edge, LogRelay* logs)
      : coordinator_(coordinator), edge_(edge), logs_(logs) {}

  grpc::Status RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context, const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* JoinGeneration(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::Status KvSet(grpc::ServerContext* context, const v1::KvSetRequest* request,
                     v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context, const v1::KvGetRequest* request,
                                  v1::KvGetResponse* response) override;
  grpc::Status KvAdd(grpc::ServerContext* context, const v1::KvAddRequest* request,
                     v1::KvAddResponse* response) override;
  grpc::Status ReportProgress(grpc::ServerContext* context, const v1::ReportProgressRequest* request,
                              v1::ReportProgressResponse* response) override;
  grpc::Status CommitCheckpoint(grpc::ServerContext* context, const v1::CommitCheckpointRequest* request,
                                v1::CommitCheckpointResponse* response) override;
  grpc::Status ReportFailure(grpc::ServerContext* context, const v1::ReportFailureRequest* request,
                             v1::ReportFailureResponse* response) override;
  // Open until the daemon leaves (or the server stops): log requests for
  // this worker's trainers (see LogRelay).
  grpc::ServerWriteReactor<v1::LogRequest>* WatchLogRequests(grpc::CallbackServerContext* context,
                                                             const v1::WatchLogRequestsRequest* request) override;
  // A daemon's answer to one log request (see LogUploadStream).
  grpc::ServerReadReactor<v1::UploadLogRequest>* UploadLog(grpc::CallbackServerContext* context,
                                                           v1::UploadLogResponse* response) override;

 private:
  // Audits a PERMISSION_DENIED `status`; returns it.
  absl::Status Denied(const std::string& method, const Principal& caller, absl::Status status) const;
  // PERMISSION_DENIED unless `caller` may act as `worker_id`.
  absl::Status CheckWorker(const std::string& method, const Principal& caller, const std::string& worker_id) const;
  // PERMISSION_DENIED unless `caller` speaks for a member of the job's
  // current generation: the member at `rank`, or any when rank < 0. Fencing
  // errors (FAILED_PRECONDITION, NOT_FOUND) pass through.
  absl::Status CheckMember(const std::string& method, const Principal& caller, const std::string& job_id,
                           int64_t generation, int64_t rank = -1) const;

  Coordinator* const coordinator_;
  const RpcEdge* const edge_;
  LogRelay* const logs_;
};

}  // namespace herd::coordinator
