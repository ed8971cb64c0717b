#include "coordinator/rpc_edge.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace herd::coordinator {
namespace {

bool RoleMayUse(Role role, Api api) {
  if (role == Role::kAdmin) return true;
  return api == Api::kJobs ? role == Role::kUser : role == Role::kWorker;
}

}  // namespace

absl::StatusOr<Principal> RpcEdge::Authorize(const std::string& method, Api api,
                                             const grpc::ServerContextBase& context) const {
  absl::StatusOr<Principal> caller = auth_->Authenticate(context);
  if (!caller.ok()) {
    // The peer address, never the token.
    Audit("unauthenticated", "", absl::StrCat(method, " from ", context.peer()), caller.status());
    return caller.status();
  }
  if (!RoleMayUse(caller->role, api)) {
    absl::Status denied = absl::PermissionDeniedError(
        absl::StrCat(method, ": principal '", caller->name, "' has role ", RoleName(caller->role), "; the ",
                     api == Api::kJobs ? "job API is for users and admins" : "cluster API is for workers and admins"));
    Audit("permission_denied", caller->name, method, denied);
    return denied;
  }
  return caller;
}

grpc::Status RpcEdge::Conclude(const std::string& method, const absl::Status& status) const {
  metrics_->CountRpc(method, status.code());
  return ToGrpcStatus(status);
}

void RpcEdge::Audit(const std::string& event, const std::string& principal, const std::string& detail,
                    const absl::Status& outcome) const {
  metrics_->CountAuditEvent(event, principal, outcome.code());
  LOG(INFO) << "audit: " << event << " by '" << principal << "': " << detail << ": "
            << (outcome.ok() ? "ok" : outcome.ToString());
}

absl::Status CheckSpeaksFor(const Principal& caller, const std::string& worker_id) {
  if (caller.SpeaksFor(worker_id)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("principal '", caller.name, "' may not act as worker '", worker_id,
                                                  "'; it speaks for: ", absl::StrJoin(caller.worker_ids, ",")));
}

}  // namespace herd::coordinator
