// Reads the PEM files that TLS flags name (a CA bundle, a certificate and
// its private key) and checks them before any connection is made, so that
// a wrong file is reported by the flag and the path that named it, not as a
// handshake failure later.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace herd {

// The flags the files came from, for error messages.
struct TlsFlagNames {
  std::string ca = "--tls-ca";
  std::string cert = "--tls-cert";
  std::string key = "--tls-key";
};

struct TlsPem {
  std::string ca;    // empty when no CA file was given
  std::string cert;  // empty when no certificate was given
  std::string key;
};

// Reads the files; an empty path means "not given". Errors name the flag and
// the file: one that cannot be read, a CA or certificate file without a PEM
// certificate, a key file without a PEM private key, a certificate without
// its key or a key without its certificate, and a key that is not the
// certificate's.
absl::StatusOr<TlsPem> ReadTlsFiles(const std::string& ca_file, const std::string& cert_file,
                                    const std::string& key_file, const TlsFlagNames& names = {});

}  // namespace herd
