// The one place where a coordinator RPC meets the wire: bearer-token check,
// per-method/code counting, and absl::Status -> grpc::Status conversion.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/auth.h"
#include "common/status_convert.h"
#include "coordinator/metrics.h"

namespace herd::coordinator {

class RpcEdge {
 public:
  // An empty `token` disables auth (--insecure-no-auth).
  RpcEdge(std::string token, Metrics* metrics) : token_(std::move(token)), metrics_(metrics) {}

  // Runs `handler` (returning absl::Status) only for callers holding the
  // token; UNAUTHENTICATED otherwise.
  template <typename Handler>
  grpc::Status Handle(const std::string& method, const grpc::ServerContext& context, Handler&& handler) const {
    absl::Status status = CheckBearerToken(context, token_);
    if (status.ok()) status = handler();
    metrics_->CountRpc(method, status.code());
    return ToGrpcStatus(status);
  }

 private:
  const std::string token_;
  Metrics* const metrics_;
};

// Moves a handler's result into the response field `*out`, or passes its
// error on: keeps handlers to one line.
template <typename T>
absl::Status AssignTo(absl::StatusOr<T> result, T* out) {
  if (!result.ok()) return result.status();
  *out = *std::move(result);
  return absl::OkStatus();
}

}  // namespace herd::coordinator
