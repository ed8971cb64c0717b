// Bearer-token handling shared by every herd process: reading a token file,
// attaching the token to calls, and taking it out of a call on the server.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class ClientContext;
class ServerContextBase;
}  // namespace grpc

namespace herd {

// Reads a token file (surrounding whitespace trimmed). Empty files are an
// error (an empty token would let anyone in), and so are files that group
// or others may read (see common/private_file.h).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Adds "authorization: Bearer <token>" to an outgoing call (no-op if empty).
void AttachBearerToken(grpc::ClientContext* context, const std::string& token);

// The bearer token a call carries; UNAUTHENTICATED when it carries none or
// the authorization metadata is not "Bearer <token>".
absl::StatusOr<std::string> BearerTokenOf(const grpc::ServerContextBase& context);

// Constant-time comparison, so response timing does not leak the token.
bool TokensEqual(const std::string& a, const std::string& b);

}  // namespace herd
