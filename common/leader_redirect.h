// How a coordinator that does not lead sends callers to the one that does.
// It answers every RPC with UNAVAILABLE, the leader's address in the trailing
// metadata key `herd-leader` (absent while nobody leads) and, for people,
// "not the leader; the leader is HOST:PORT" in the message. The address is no
// secret (a Kubernetes Service names it too), so followers answer unauthenticated.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/status.h>

#include <string>

#include "absl/synchronization/mutex.h"

namespace herd {

inline constexpr char kLeaderMetadataKey[] = "herd-leader";
// The health service name that every coordinator, leading or not, answers
// SERVING: a liveness probe asks for it, a readiness probe for "" (leading).
inline constexpr char kLivenessService[] = "herd.live";

// The status a follower answers: `leader` is "" while nobody leads, and then
// `why` (e.g. "etcd does not answer") says what keeps an election from ending.
grpc::Status NotLeaderStatus(const std::string& leader, const std::string& why);

// The leader a failed call's trailing metadata names ("" when none).
std::string LeaderHint(const grpc::ClientContext& context);

// Answers every method (the health check of "" too, so a Kubernetes
// readiness probe sees a follower as not ready) with NotLeaderStatus; only
// the health check of kLivenessService answers SERVING (it is alive).
// Register it alone on a follower's server.
class NotLeaderService : public grpc::CallbackGenericService {
 public:
  // Thread-safe: the campaign updates them as the leader key changes.
  void SetLeader(const std::string& leader, const std::string& why);

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override;

 private:
  absl::Mutex mu_;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  std::string why_ ABSL_GUARDED_BY(mu_) = "no leader has been seen yet";
};

}  // namespace herd
