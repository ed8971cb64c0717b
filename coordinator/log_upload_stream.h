// UploadLog's stream: a worker daemon pushing a trainer's log (or a model
// file) into the reader's LogSession. Its first message names the session.
// It reads the next message only while the session has room, so the
// session's bounded buffer slows a fast uploader, and while it waits for
// room or for the trainer's next lines it holds no thread. It ends when the
// daemon ends it (the session's end), the daemon breaks off, the reader
// leaves (CANCELLED, so the daemon stops) or the server stops (UNAVAILABLE).
// It owns itself until gRPC is done with it (OnDone), and counts as open
// (herd_coordinator_open_streams) until then.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/log_relay.h"
#include "coordinator/metrics.h"
#include "coordinator/rpc_edge.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

class LogUploadStream final : public grpc::ServerReadReactor<v1::UploadLogRequest> {
 public:
  // PERMISSION_DENIED unless the caller may act as the worker named.
  using CheckWorker = std::function<absl::Status(const std::string& worker_id)>;

  static std::shared_ptr<LogUploadStream> Open(LogRelay* relay, const grpc::CallbackServerContext* context,
                                               Metrics::OpenStreamCount open);

  LogUploadStream(LogRelay* relay, const grpc::CallbackServerContext* context, Metrics::OpenStreamCount open)
      : relay_(relay), context_(context), open_(std::move(open)) {}

  // The call was accepted: reads the first message. End hands the call's
  // status to `answer` (the edge's, so it is counted as every other).
  void Begin(RpcEdge::Answer answer, CheckWorker check);

  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // The first message: the session it names, if the caller may upload it.
  void Attach();
  // Hands the message read to the session.
  void Take(std::shared_ptr<LogSession> session);
  // Reads the next message if the session has room and none is being read;
  // ends the call once the session is closed. Any thread may call it.
  void Resume();
  // Ends the call with `status` (only the first End counts), ending the
  // session first with `session_end` if given.
  void End(const absl::Status& status, std::optional<absl::Status> session_end = std::nullopt);
  // The daemon went: the reader learns the log broke off.
  void BrokeOff();

  LogRelay* const relay_;
  const grpc::CallbackServerContext* const context_;
  Metrics::OpenStreamCount open_;
  std::shared_ptr<LogUploadStream> self_;
  std::weak_ptr<LogUploadStream> weak_self_;
  CheckWorker check_;
  // Written by gRPC during a read, read only after it (OnReadDone).
  v1::UploadLogRequest message_;
  absl::Mutex mu_;
  RpcEdge::Answer answer_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<LogSession> session_ ABSL_GUARDED_BY(mu_);  // once attached
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace herd::coordinator
