// What every herd gRPC server shares: it never shares its port (gRPC turns
// SO_REUSEPORT on by default, so a second server on a used port would start
// and take half the connections), and it serves the standard health service
// (grpc.health.v1.Health) that Kubernetes gRPC probes call.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace herd {

// Call before `builder` builds its server: refuses port sharing and turns the
// default health service on. The health service needs no credentials.
void ConfigureServerBuilder(grpc::ServerBuilder& builder);

// Builds and starts the server listening on `listen` (port 0 picks one) and
// returns it with the bound port. Fails naming the address when it cannot
// bind, e.g. because another process uses the port.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};
absl::StatusOr<StartedServer> BuildAndStartServer(grpc::ServerBuilder& builder, const std::string& listen,
                                                  const std::shared_ptr<grpc::ServerCredentials>& credentials);

// Sets the overall ("") health status of `server`.
void SetServing(grpc::Server* server, bool serving);

// Calls grpc.health.v1.Health/Check for `service` ("" = the whole server):
// true for SERVING, false for any other status; an error when the call fails.
// The same on a caller's `context` (its deadline, its trailers afterwards):
// `*serving` is set when the call succeeds.
grpc::Status CallHealthCheck(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                             grpc::ClientContext* context, bool* serving);

absl::StatusOr<bool> CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                                 std::chrono::milliseconds timeout);

}  // namespace herd
