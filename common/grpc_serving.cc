#include "common/grpc_serving.h"

#include <grpcpp/completion_queue.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/byte_buffer.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_convert.h"

namespace herd {
namespace {

constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";
// grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING
constexpr int kServing = 1;

}  // namespace

void ConfigureServerBuilder(grpc::ServerBuilder& builder) {
  grpc::EnableDefaultHealthCheckService(true);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

absl::StatusOr<StartedServer> BuildAndStartServer(grpc::ServerBuilder& builder, const std::string& listen,
                                                  const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  ConfigureServerBuilder(builder);
  StartedServer started;
  builder.AddListeningPort(listen, credentials, &started.port);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, ": the address is in use or not valid here"));
  }
  return started;
}

void SetServing(grpc::Server* server, bool serving) {
  if (server != nullptr && server->GetHealthCheckService() != nullptr) {
    server->GetHealthCheckService()->SetServingStatus(serving);
  }
}

grpc::Status CallHealthCheck(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                             grpc::ClientContext* context, bool* serving) {
  // HealthCheckRequest{service = 1: string}, encoded by hand: herd has no
  // other use for the health proto.
  if (service.size() > 127) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "health check service name too long");
  }
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice request_slice(request);
  grpc::ByteBuffer request_buffer(&request_slice, 1);
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue queue;
  auto call = stub.PrepareUnaryCall(context, kHealthCheckMethod, request_buffer, &queue);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "unreadable health check response");
  std::string bytes;
  for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  // HealthCheckResponse{status = 1: enum}; absent means UNKNOWN (0).
  *serving = bytes.size() >= 2 && bytes[0] == 0x08 && bytes[1] == kServing;
  return grpc::Status::OK;
}

absl::StatusOr<bool> CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                                 std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  bool serving = false;
  grpc::Status status = CallHealthCheck(channel, service, &context, &serving);
  if (!status.ok()) return FromGrpcStatus(status);
  return serving;
}

}  // namespace herd
