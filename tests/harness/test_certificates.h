// Certificates for TLS tests, made with openssl in a folder: a CA (ca.crt,
// ca.key), a server certificate for 127.0.0.1 (server.crt, server.key) and
// one client certificate per common name (NAME.crt, NAME.key). EC keys:
// fast to make.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace herd::testing {

absl::Status MakeCertificates(const std::string& dir, const std::vector<std::string>& clients);

}  // namespace herd::testing
