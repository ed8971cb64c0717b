// The coordinator's auth file: who may call it, in which role, with which
// credential. One credential per line, '#' starts a comment:
//
//   # PRINCIPAL  ROLE    CREDENTIAL              WORKER-IDS (workers only)
//   alice        user    sha256:<64 hex digits>
//   ops          admin   sha256:<64 hex digits>
//   pool-a       worker  sha256:<64 hex digits>  w0,w1,gpu-*
//   node-7       worker  cert:node-7.example     node-7
//
// sha256: the SHA-256 of a bearer token (`printf %s TOKEN | sha256sum`), so
// the file holds no token. cert: a client certificate identity under mutual
// TLS (a subject alternative name, else the common name). A principal may
// have several lines (a token and a certificate, or an old and a new token
// during rotation), all with the same role and worker ids.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/principal.h"

namespace herd::coordinator {

struct Credential {
  Principal principal;
  std::string token_sha256;   // lower-case hex; "" for a certificate line
  std::string cert_identity;  // "" for a token line
};

struct AuthTable {
  std::vector<Credential> credentials;
};

// INVALID_ARGUMENT naming `source`, the line and what is wrong.
absl::StatusOr<AuthTable> ParseAuthFile(const std::string& text, const std::string& source);

// Reads and parses an auth file that only its owner may read.
absl::StatusOr<AuthTable> LoadAuthFile(const std::string& path);

}  // namespace herd::coordinator
