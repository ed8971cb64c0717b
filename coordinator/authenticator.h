// Turns a call's credential into a Principal: a bearer token (compared by
// its SHA-256, in constant time, against every token of the auth file) or,
// under mutual TLS, the client certificate's identity. The table is
// replaced atomically by Reload (SIGHUP), so rotation needs no restart.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/auth_file.h"
#include "coordinator/principal.h"

namespace grpc {
class ServerContextBase;
}

namespace herd::coordinator {

class Authenticator {
 public:
  // Loads `path`; its errors name the file and line.
  static absl::StatusOr<std::unique_ptr<Authenticator>> FromFile(const std::string& path);
  // Auth off (--insecure-no-auth): every caller is AnonymousAdmin().
  static std::unique_ptr<Authenticator> Disabled();

  // Rereads the file. On error the table in use stays, and the error is
  // returned for the log.
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);

  // UNAUTHENTICATED (never naming the token) when the call carries no
  // credential the table knows.
  absl::StatusOr<Principal> Authenticate(const grpc::ServerContextBase& context) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Authenticator(std::string path, std::shared_ptr<const AuthTable> table)
      : path_(std::move(path)), table_(std::move(table)) {}

  std::shared_ptr<const AuthTable> Table() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;  // "" when disabled
  mutable absl::Mutex mu_;
  std::shared_ptr<const AuthTable> table_ ABSL_GUARDED_BY(mu_);
};

// Finds the principal for a bearer token; every token line is compared, so
// the time taken does not depend on which (if any) matches. nullptr if none.
const Principal* FindByToken(const AuthTable& table, const std::string& token);

}  // namespace herd::coordinator
