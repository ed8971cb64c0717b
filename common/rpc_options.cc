#include "common/rpc_options.h"

#include "common/auth.h"

namespace herd {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& tls,
                                                                                 const TlsFlagNames& names) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  auto pem = ReadTlsFiles(tls.ca_file, tls.cert_file, tls.key_file, names);
  if (!pem.ok()) return pem.status();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem->ca;  // empty: gRPC's default roots
  ssl.pem_cert_chain = pem->cert;
  ssl.pem_private_key = pem->key;
  return grpc::SslCredentials(ssl);
}

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
  auto creds = MakeChannelCredentials(tls);
  if (!creds.ok()) return creds.status();
  return grpc::CreateCustomChannel(address, *creds, args);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (tls.require_client_cert && tls.ca_file.empty()) {
    return absl::InvalidArgumentError("mutual TLS needs --tls-ca to verify client certificates");
  }
  auto pem = ReadTlsFiles(tls.ca_file, tls.cert_file, tls.key_file);
  if (!pem.ok()) return pem.status();
  grpc::SslServerCredentialsOptions ssl(tls.require_client_cert
                                            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_root_certs = pem->ca;
  ssl.pem_key_cert_pairs.push_back({pem->key, pem->cert});
  return grpc::SslServerCredentials(ssl);
}

std::unique_ptr<grpc::ClientContext> NewCallContext(const std::string& token, std::chrono::milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  AttachBearerToken(context.get(), token);
  return context;
}

}  // namespace herd
