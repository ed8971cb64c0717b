#include "common/auth.h"

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/private_file.h"

namespace herd {
namespace {
constexpr char kAuthorization[] = "authorization";
constexpr char kBearerPrefix[] = "Bearer ";
}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto text = ReadPrivateFile(path, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file is empty: ", path));
  return token;
}

void AttachBearerToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata(kAuthorization, kBearerPrefix + token);
}

absl::StatusOr<std::string> BearerTokenOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorization);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing bearer token (authorization metadata)");
  }
  std::string value(it->second.data(), it->second.size());
  if (value.rfind(kBearerPrefix, 0) != 0 || value.size() == sizeof(kBearerPrefix) - 1) {
    return absl::UnauthenticatedError("authorization metadata is not \"Bearer <token>\"");
  }
  return value.substr(sizeof(kBearerPrefix) - 1);
}

bool TokensEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;  // the length is not the secret
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace herd
