#include "common/sha256.h"

#include <openssl/sha.h>

#include "absl/strings/str_format.h"

namespace herd {

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  std::string hex;
  for (unsigned char c : digest) absl::StrAppendFormat(&hex, "%02x", c);
  return hex;
}

}  // namespace herd
