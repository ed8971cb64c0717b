#include "common/rpc_options.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/auth.h"

namespace herd {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read TLS file: ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address, const TlsOptions& tls) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a coordinator restart: attempts from 0.2 s apart
  // growing to 2 s. gRPC also takes the "min reconnect backoff" as the least
  // time a connection attempt may take; at 0.2 s a loaded machine could not
  // finish the handshake ("tcp handshaker shutdown"). 1 s leaves room.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  // A channel made anew (LeaderChannel, after a call ran out of time) must
  // open its own connection, not share the stuck one from the global pool.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (tls.enabled()) {
    grpc::SslCredentialsOptions ssl;
    if (!tls.ca_file.empty()) {
      auto ca = ReadPem(tls.ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    if (!tls.cert_file.empty()) {
      auto cert = ReadPem(tls.cert_file);
      auto key = ReadPem(tls.key_file);
      if (!cert.ok()) return cert.status();
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  auto cert = ReadPem(tls.cert_file);
  auto key = ReadPem(tls.key_file);
  if (!cert.ok()) return cert.status();
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(tls.require_client_cert
                                            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!tls.ca_file.empty()) {
    auto ca = ReadPem(tls.ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  } else if (tls.require_client_cert) {
    return absl::InvalidArgumentError("mutual TLS needs --tls-ca to verify client certificates");
  }
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

std::unique_ptr<grpc::ClientContext> NewCallContext(const std::string& token, std::chrono::milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  AttachBearerToken(context.get(), token);
  return context;
}

}  // namespace herd
