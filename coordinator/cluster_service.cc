#include "coordinator/cluster_service.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/incarnation.h"
#include "coordinator/log_request_stream.h"
#include "coordinator/log_upload_stream.h"

namespace herd::coordinator {
namespace {

// A call that waits for others (JoinGeneration on the join board, KvGet
// in the KV store) without a thread. `cancel(id)` ends its wait when the
// caller goes; gRPC ends the call (OnDone) after its Finish.
class WaitingCall final : public grpc::ServerUnaryReactor {
 public:
  explicit WaitingCall(std::function<void(uint64_t)> cancel) : cancel_(std::move(cancel)) {}

  // The wait began (0: it was answered at once). Called before the handler
  // returns, or under a Hold, so the call is alive; a cancel that came
  // first cancels it now.
  void Waiting(uint64_t id) {
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      id_ = id;
      cancelled = cancelled_;
    }
    if (cancelled && id != 0) cancel_(id);
  }

  // The caller went (or its deadline passed): the wait answers CANCELLED.
  void OnCancel() override {
    uint64_t id;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      id = id_;
    }
    if (id != 0) cancel_(id);
  }

  // Keeps the call alive past the handler, for one that begins its wait on
  // another thread (Waiting, then Release).
  void Hold() {
    absl::MutexLock lock(&mu_);
    held_ = true;
  }
  void Release() {
    bool ended;
    {
      absl::MutexLock lock(&mu_);
      held_ = false;
      ended = done_;
    }
    if (ended) delete this;
  }

  void OnDone() override {
    bool held;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      held = held_;
    }
    if (!held) delete this;
  }

 private:
  const std::function<void(uint64_t)> cancel_;
  absl::Mutex mu_;
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// `bytes` parsed as a `Message`; INVALID_ARGUMENT naming `method` otherwise.
template <typename Message>
absl::StatusOr<Message> ParseRequest(const char* method, const grpc::ByteBuffer& bytes) {
  std::vector<grpc::Slice> slices;
  Message message;
  std::string flat;
  if (bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    if (message.ParseFromString(flat)) return message;
  }
  return absl::InvalidArgumentError(absl::StrCat(method, ": the request is not a valid ", Message::descriptor()->name()));
}

// `answer` as the bytes of a JoinGenerationResponse: the shared part by
// reference (kept alive until gRPC has sent it), then the rank's own fields.
grpc::ByteBuffer AnswerBytes(const JoinAnswer& answer) {
  const std::string& shared = answer.shared->serialized;
  auto* keep = new std::shared_ptr<const FormedAnswer>(answer.shared);
  grpc::Slice slices[2] = {
      grpc::Slice(const_cast<char*>(shared.data()), shared.size(),
                  [](void* kept) { delete static_cast<std::shared_ptr<const FormedAnswer>*>(kept); }, keep),
      grpc::Slice(answer.OwnFields())};
  return grpc::ByteBuffer(slices, 2);
}

// The calling daemon process's incarnation, "" when it sent none.
std::string Incarnation(const grpc::ServerContext& context) {
  auto it = context.client_metadata().find(kIncarnationMetadataKey);
  return it == context.client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
}

}  // namespace

absl::Status ClusterServiceImpl::Denied(const std::string& method, const Principal& caller,
                                        absl::Status status) const {
  if (absl::IsPermissionDenied(status)) edge_->Audit("permission_denied", caller.name, method, status);
  return status;
}

absl::Status ClusterServiceImpl::CheckWorker(const std::string& method, const Principal& caller,
                                             const std::string& worker_id) const {
  return Denied(method, caller, CheckSpeaksFor(caller, worker_id));
}

absl::Status ClusterServiceImpl::CheckMember(const std::string& method, const Principal& caller,
                                             const std::string& job_id, int64_t generation, int64_t rank) const {
  if (caller.role == Role::kAdmin) return absl::OkStatus();
  auto members = coordinator_->GenerationMembers(job_id, generation);
  if (!members.ok()) return members.status();
  if (rank >= 0) {
    if (rank >= static_cast<int64_t>(members->size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is not in generation ", generation, " of job ", job_id));
    }
    return CheckWorker(method, caller, (*members)[rank]);
  }
  for (const std::string& member : *members) {
    if (caller.SpeaksFor(member)) return absl::OkStatus();
  }
  return Denied(method, caller,
                absl::PermissionDeniedError(absl::StrCat("principal '", caller.name, "' speaks for no member of job ",
                                                         job_id, " generation ", generation)));
}

grpc::Status ClusterServiceImpl::RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                                                v1::RegisterWorkerResponse* response) {
  return edge_->Handle("RegisterWorker", Api::kCluster, *context, [&](const Principal& caller) {
    absl::Status status = CheckWorker("RegisterWorker", caller, request->worker_id());
    if (!status.ok()) return status;
    status = AssignTo(coordinator_->RegisterWorker(*request, Incarnation(*context)), response);
    edge_->Audit("register", caller.name, absl::StrCat("worker ", request->worker_id(), " at ", request->address()),
                 status);
    return status;
  });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::Heartbeat(grpc::CallbackServerContext* context,
                                                        const v1::HeartbeatRequest* request,
                                                        v1::HeartbeatResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  edge_->HandleLater(
      "Heartbeat", Api::kCluster, *context,
      [&](const Principal& caller, RpcEdge::Answer answer) {
        if (auto status = CheckWorker("Heartbeat", caller, request->worker_id()); !status.ok()) {
          answer(status);
          return;
        }
        // A lease renewal is answered here; a heartbeat that changes state
        // may wait for the state lock and its write (a stalled store: its
        // call timeout), which must not hold one of gRPC's few callback
        // threads. Such heartbeats are rare (a worker's state changed), so
        // each gets a thread of its own, as the synchronous server gave it.
        if (std::optional<v1::HeartbeatResponse> renewed = coordinator_->RenewLease(*request)) {
          *response = *std::move(renewed);
          answer(absl::OkStatus());
          return;
        }
        std::thread([coordinator = coordinator_, request, response, answer = std::move(answer)]() mutable {
          answer(AssignTo(coordinator->Heartbeat(*request), response));  // the call ends here: nothing after
        }).detach();
      },
      [reactor](grpc::Status status) { reactor->Finish(std::move(status)); });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterServiceImpl::JoinGeneration(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* request_bytes,
                                                             grpc::ByteBuffer* response) {
  auto* call = new WaitingCall([coordinator = coordinator_](uint64_t id) { coordinator->CancelJoin(id); });
  edge_->HandleLater(
      "JoinGeneration", Api::kCluster, *context,
      [&](const Principal& caller, RpcEdge::Answer answer) {
        auto request = ParseRequest<v1::JoinGenerationRequest>("JoinGeneration", *request_bytes);
        if (!request.ok()) {
          answer(request.status());
          return;
        }
        if (auto status = CheckWorker("JoinGeneration", caller, request->worker_id()); !status.ok()) {
          answer(status);
          return;
        }
        const bool changes_state = coordinator_->JoinChangesState(*request);
        auto start = [coordinator = coordinator_, call, response, request = *std::move(request),
                      answer = std::move(answer)]() mutable {
          call->Waiting(coordinator->StartJoinGeneration(
              request, [response, answer = std::move(answer)](absl::StatusOr<JoinAnswer> joined) mutable {
                if (joined.ok()) *response = AnswerBytes(*joined);
                answer(joined.status());
              }));
        };
        if (!changes_state) {
          start();
          return;
        }
        // Its state change may wait for the state lock and the change's
        // write (a stalled store: its call timeout): not on one of gRPC's
        // few callback threads (as for Heartbeat).
        call->Hold();
        std::thread([call, start = std::move(start)]() mutable {
          start();
          call->Release();
        }).detach();
      },
      [call](grpc::Status status) { call->Finish(std::move(status)); });
  return call;
}

grpc::Status ClusterServiceImpl::KvSet(grpc::ServerContext* context, const v1::KvSetRequest* request,
                                       v1::KvSetResponse* response) {
  return edge_->Handle("KvSet", Api::kCluster, *context, [&](const Principal& caller) {
    if (auto status = CheckMember("KvSet", caller, request->job_id(), request->generation()); !status.ok()) {
      return status;
    }
    return coordinator_->KvSet(*request);
  });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::KvGet(grpc::CallbackServerContext* context,
                                                    const v1::KvGetRequest* request, v1::KvGetResponse* response) {
  auto* call = new WaitingCall([coordinator = coordinator_](uint64_t id) { coordinator->CancelKvGet(id); });
  edge_->HandleLater(
      "KvGet", Api::kCluster, *context,
      [&](const Principal& caller, RpcEdge::Answer answer) {
        if (auto status = CheckMember("KvGet", caller, request->job_id(), request->generation()); !status.ok()) {
          answer(status);
          return;
        }
        call->Waiting(coordinator_->StartKvGet(
            *request, [response, answer = std::move(answer)](absl::StatusOr<std::string> value) mutable {
              answer(AssignTo(std::move(value), response->mutable_value()));
            }));
      },
      [call](grpc::Status status) { call->Finish(std::move(status)); });
  return call;
}

grpc::Status ClusterServiceImpl::KvAdd(grpc::ServerContext* context, const v1::KvAddRequest* request,
                                       v1::KvAddResponse* response) {
  return edge_->Handle("KvAdd", Api::kCluster, *context, [&](const Principal& caller) -> absl::Status {
    if (auto status = CheckMember("KvAdd", caller, request->job_id(), request->generation()); !status.ok()) {
      return status;
    }
    auto value = coordinator_->KvAdd(*request);
    if (!value.ok()) return value.status();
    response->set_value(*value);
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::ReportProgress(grpc::ServerContext* context, const v1::ReportProgressRequest* request,
                                                v1::ReportProgressResponse* response) {
  return edge_->Handle("ReportProgress", Api::kCluster, *context, [&](const Principal& caller) {
    if (auto status =
            CheckMember("ReportProgress", caller, request->job_id(), request->generation(), request->rank());
        !status.ok()) {
      return status;
    }
    return AssignTo(coordinator_->ReportProgress(*request), response);
  });
}

grpc::Status ClusterServiceImpl::CommitCheckpoint(grpc::ServerContext* context,
                                                  const v1::CommitCheckpointRequest* request,
                                                  v1::CommitCheckpointResponse* response) {
  return edge_->Handle("CommitCheckpoint", Api::kCluster, *context, [&](const Principal& caller) {
    // Delivered again (a lost answer, or the daemon of a trainer that exited
    // before its record was answered): the entry listed, whatever generation
    // runs now, so a recorded checkpoint is never taken for a refused one.
    if (auto listed = coordinator_->ListedCheckpoint(*request); listed.has_value()) {
      *response->mutable_checkpoint() = *std::move(listed);
      return absl::OkStatus();
    }
    // Rank 0 writes checkpoints.
    if (auto status = CheckMember("CommitCheckpoint", caller, request->job_id(), request->generation(), 0);
        !status.ok()) {
      return status;
    }
    return AssignTo(coordinator_->CommitCheckpoint(*request), response);
  });
}

grpc::Status ClusterServiceImpl::ReportFailure(grpc::ServerContext* context, const v1::ReportFailureRequest* request,
                                               v1::ReportFailureResponse* response) {
  return edge_->Handle("ReportFailure", Api::kCluster, *context, [&](const Principal& caller) {
    if (auto status = CheckWorker("ReportFailure", caller, request->worker_id()); !status.ok()) return status;
    return coordinator_->ReportFailure(*request);
  });
}

grpc::ServerWriteReactor<v1::LogRequest>* ClusterServiceImpl::WatchLogRequests(
    grpc::CallbackServerContext* context, const v1::WatchLogRequestsRequest* request) {
  std::shared_ptr<LogRequestStream> stream =
      LogRequestStream::Open(logs_, request->worker_id(), edge_->CountOpenStream(StreamKind::kLogRequests));
  edge_->HandleLater(
      "WatchLogRequests", Api::kCluster, *context,
      [&](const Principal& caller, RpcEdge::Answer answer) {
        if (auto status = CheckWorker("WatchLogRequests", caller, request->worker_id()); !status.ok()) {
          answer(status);
          return;
        }
        stream->Begin(std::move(answer));
        if (auto status = logs_->Listen(request->worker_id(), stream); !status.ok()) stream->End(status);
      },
      [stream = stream.get()](grpc::Status status) { stream->FinishWhenWritten(std::move(status)); });
  return stream.get();
}

grpc::ServerReadReactor<v1::UploadLogRequest>* ClusterServiceImpl::UploadLog(grpc::CallbackServerContext* context,
                                                                             v1::UploadLogResponse* /*response*/) {
  std::shared_ptr<LogUploadStream> stream =
      LogUploadStream::Open(logs_, context, edge_->CountOpenStream(StreamKind::kLogUpload));
  edge_->HandleLater(
      "UploadLog", Api::kCluster, *context,
      [&](const Principal& caller, RpcEdge::Answer answer) {
        stream->Begin(std::move(answer), [this, caller](const std::string& worker_id) {
          return CheckWorker("UploadLog", caller, worker_id);
        });
      },
      [stream = stream.get()](grpc::Status status) { stream->Finish(std::move(status)); });
  return stream.get();
}

}  // namespace herd::coordinator
