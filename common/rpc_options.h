// Transport settings shared by every herd client and server: message size
// limits, TLS, and the bearer token attached to each call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/tls_files.h"

namespace herd {

// Requests and responses are small control messages; the data path never
// crosses the coordinator. 16 MiB leaves room for large job lists.
constexpr int kMaxMessageBytes = 16 << 20;

struct TlsOptions {
  std::string ca_file;    // client: CA to verify the server; server: CA for mTLS
  std::string cert_file;  // server cert, or client cert for mTLS
  std::string key_file;
  bool require_client_cert = false;  // server only: mutual TLS
  bool enabled() const { return !ca_file.empty() || !cert_file.empty(); }
};

// Channel credentials for the given TLS options (insecure when disabled);
// errors name the files by the flags in `names`.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& tls,
                                                                                 const TlsFlagNames& names = {});

// A channel to `address` with herd's size limits (TLS when tls.enabled()).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                          const TlsOptions& tls = {});

// Server credentials for the given TLS options (insecure when disabled).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls);

// A client context with a deadline and the bearer token. Clients always set
// deadlines so a dead peer never hangs a caller.
std::unique_ptr<grpc::ClientContext> NewCallContext(const std::string& token,
                                                    std::chrono::milliseconds timeout);

}  // namespace herd
