#include "coordinator/authenticator.h"

#include <grpcpp/security/auth_context.h>
#include <grpcpp/server_context.h>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/sha256.h"

namespace herd::coordinator {

const Principal* FindByToken(const AuthTable& table, const std::string& token) {
  const std::string digest = Sha256Hex(token);
  const Principal* found = nullptr;
  for (const Credential& credential : table.credentials) {
    if (credential.token_sha256.empty()) continue;
    // No early exit: the loop takes as long whichever line matches.
    const bool match = TokensEqual(digest, credential.token_sha256);
    if (match) found = &credential.principal;
  }
  return found;
}

namespace {

// The verified client certificate's identities (SANs, else the CN); empty
// without mutual TLS.
std::vector<std::string> PeerCertificateIdentities(const grpc::ServerContextBase& context) {
  std::vector<std::string> identities;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return identities;
  for (const grpc::string_ref& identity : auth->GetPeerIdentity()) {
    identities.emplace_back(identity.data(), identity.size());
  }
  return identities;
}

const Principal* FindByCertificate(const AuthTable& table, const std::vector<std::string>& identities) {
  for (const Credential& credential : table.credentials) {
    if (credential.cert_identity.empty()) continue;
    for (const std::string& identity : identities) {
      if (identity == credential.cert_identity) return &credential.principal;
    }
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::FromFile(const std::string& path) {
  auto table = LoadAuthFile(path);
  if (!table.ok()) return table.status();
  return std::unique_ptr<Authenticator>(
      new Authenticator(path, std::make_shared<const AuthTable>(*std::move(table))));
}

std::unique_ptr<Authenticator> Authenticator::Disabled() {
  return std::unique_ptr<Authenticator>(new Authenticator("", nullptr));
}

absl::Status Authenticator::Reload() {
  if (path_.empty()) return absl::FailedPreconditionError("auth is disabled: there is no auth file to reload");
  auto table = LoadAuthFile(path_);
  if (!table.ok()) return table.status();
  absl::MutexLock lock(&mu_);
  table_ = std::make_shared<const AuthTable>(*std::move(table));
  return absl::OkStatus();
}

std::shared_ptr<const AuthTable> Authenticator::Table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

absl::StatusOr<Principal> Authenticator::Authenticate(const grpc::ServerContextBase& context) const {
  std::shared_ptr<const AuthTable> table = Table();
  if (table == nullptr) return AnonymousAdmin();
  auto token = BearerTokenOf(context);
  if (token.ok()) {
    if (const Principal* principal = FindByToken(*table, *token)) return *principal;
    return absl::UnauthenticatedError("invalid bearer token");
  }
  std::vector<std::string> identities = PeerCertificateIdentities(context);
  if (identities.empty()) return token.status();
  if (const Principal* principal = FindByCertificate(*table, identities)) return *principal;
  return absl::UnauthenticatedError(
      absl::StrCat("client certificate '", identities.front(), "' is not in the auth file"));
}

}  // namespace herd::coordinator
