// The one place where a coordinator RPC meets the wire: who is calling
// (Authenticator), whether that role may use this API, per-method/code
// counting, open streams, the audit log, and absl::Status -> grpc::Status
// conversion.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_convert.h"
#include "coordinator/authenticator.h"
#include "coordinator/metrics.h"
#include "coordinator/principal.h"

namespace herd::coordinator {

// Which service a method belongs to: JobService is for users (and admins),
// ClusterService for workers (and admins).
enum class Api { kJobs, kCluster };

class RpcEdge {
 public:
  // `auth` and `metrics` must outlive the edge.
  RpcEdge(const Authenticator* auth, Metrics* metrics) : auth_(auth), metrics_(metrics) {}

  // Runs `handler(const Principal& caller) -> absl::Status` only for an
  // authenticated caller whose role may use `api`: UNAUTHENTICATED or
  // PERMISSION_DENIED otherwise (both audited).
  template <typename Handler>
  grpc::Status Handle(const std::string& method, Api api, const grpc::ServerContextBase& context,
                      Handler&& handler) const {
    absl::StatusOr<Principal> caller = Authorize(method, api, context);
    return Conclude(method, caller.ok() ? handler(*caller) : caller.status());
  }

  // The same for a call answered later (a callback method's reactor):
  // `handler(const Principal& caller, Answer answer)` sees to it that
  // `answer(status)` runs once, on any thread; that counts the call and
  // hands its gRPC status to `finish`.
  using Answer = absl::AnyInvocable<void(const absl::Status&)>;
  template <typename Handler>
  void HandleLater(const std::string& method, Api api, const grpc::ServerContextBase& context, Handler&& handler,
                   absl::AnyInvocable<void(grpc::Status)> finish) const {
    absl::StatusOr<Principal> caller = Authorize(method, api, context);
    Answer answer = [this, method, finish = std::move(finish)](const absl::Status& status) mutable {
      finish(Conclude(method, status));
    };
    if (!caller.ok()) {
      answer(caller.status());
      return;
    }
    handler(*caller, std::move(answer));
  }

  // Counts a stream of `kind` as open (herd_coordinator_open_streams) until
  // the result is closed or goes.
  Metrics::OpenStreamCount CountOpenStream(StreamKind kind) const { return metrics_->CountOpenStream(kind); }

  // Logs a mutating call (submit, cancel, register, a denied request) with
  // its principal and outcome, and counts it in
  // herd_coordinator_audit_events_total. `detail` must hold no secret.
  void Audit(const std::string& event, const std::string& principal, const std::string& detail,
             const absl::Status& outcome) const;

 private:
  absl::StatusOr<Principal> Authorize(const std::string& method, Api api,
                                     const grpc::ServerContextBase& context) const;
  // Counts the call by method and code; its status for the wire.
  grpc::Status Conclude(const std::string& method, const absl::Status& status) const;

  const Authenticator* const auth_;
  Metrics* const metrics_;
};

// PERMISSION_DENIED unless `caller` may act as worker `worker_id`.
absl::Status CheckSpeaksFor(const Principal& caller, const std::string& worker_id);

// Moves a handler's result into the response field `*out`, or passes its
// error on: keeps handlers to one line.
template <typename T>
absl::Status AssignTo(absl::StatusOr<T> result, T* out) {
  if (!result.ok()) return result.status();
  *out = *std::move(result);
  return absl::OkStatus();
}

}  // namespace herd::coordinator
