// Bearer-token authentication shared by every herd process.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class ClientContext;
class ServerContext;
}  // namespace grpc

namespace herd {

// Reads a token file (surrounding whitespace trimmed). Empty files are an
// error: an empty token would let anyone in.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Adds "authorization: Bearer <token>" to an outgoing call (no-op if empty).
void AttachBearerToken(grpc::ClientContext* context, const std::string& token);

// UNAUTHENTICATED unless the call carries the expected bearer token. An empty
// `expected` means auth is disabled (--insecure-no-auth) and accepts all.
absl::Status CheckBearerToken(const grpc::ServerContext& context,
                              const std::string& expected);

// Constant-time comparison, so response timing does not leak the token.
bool TokensEqual(const std::string& a, const std::string& b);

}  // namespace herd
