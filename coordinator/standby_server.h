// What a standby coordinator serves while it campaigns on etcd: every RPC
// (job and cluster APIs, the health check too) answers UNAVAILABLE with the
// leader's address (common/leader_redirect.h), so clients given several
// coordinator addresses find the leader, and a Kubernetes readiness probe
// sees a standby as not ready. Once it leads, the standby server goes and
// the real one binds the same port.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/leader_redirect.h"

namespace herd::coordinator {

class StandbyServer {
 public:
  static absl::StatusOr<std::unique_ptr<StandbyServer>> Start(
      const std::string& listen, const std::shared_ptr<grpc::ServerCredentials>& credentials);
  // Stops answering and frees the port.
  ~StandbyServer();

  int port() const { return port_; }
  // Thread-safe: who leads ("" and why while nobody can be named).
  void SetLeader(const std::string& leader, const std::string& why) { service_.SetLeader(leader, why); }

 private:
  StandbyServer() = default;

  NotLeaderService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace herd::coordinator
