#include "coordinator/standby_server.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/server_builder.h>

#include <chrono>

#include "common/grpc_serving.h"
#include "common/rpc_options.h"

namespace herd::coordinator {

absl::StatusOr<std::unique_ptr<StandbyServer>> StandbyServer::Start(
    const std::string& listen, const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  std::unique_ptr<StandbyServer> standby(new StandbyServer());
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  // No health service of its own: the health check reaches the generic
  // service too and hears "not the leader".
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  builder.RegisterCallbackGenericService(&standby->service_);
  auto started = BuildAndStartServer(builder, listen, credentials);
  if (!started.ok()) return started.status();
  standby->server_ = std::move(started->server);
  standby->port_ = started->port;
  return standby;
}

StandbyServer::~StandbyServer() {
  // Its answers are immediate: nothing is left to wait for.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

}  // namespace herd::coordinator
