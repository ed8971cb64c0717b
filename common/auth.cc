#include "common/auth.h"

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace herd {
namespace {
constexpr char kAuthorization[] = "authorization";
constexpr char kBearerPrefix[] = "Bearer ";
}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("token file not readable: ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(buffer.str()));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file is empty: ", path));
  return token;
}

void AttachBearerToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata(kAuthorization, kBearerPrefix + token);
}

bool TokensEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;  // the length is not the secret
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& expected) {
  if (expected.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorization);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing bearer token (authorization metadata)");
  }
  std::string value(it->second.data(), it->second.size());
  if (value.rfind(kBearerPrefix, 0) != 0 || !TokensEqual(value.substr(sizeof(kBearerPrefix) - 1), expected)) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace herd
