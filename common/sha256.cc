#include "common/sha256.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "absl/strings/str_format.h"

namespace herd {
namespace {

std::string Hex(const unsigned char* digest, unsigned int size) {
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) absl::StrAppendFormat(&hex, "%02x", digest[i]);
  return hex;
}

}  // namespace

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return Hex(digest, SHA256_DIGEST_LENGTH);
}

struct Sha256Stream::State {
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  ~State() { EVP_MD_CTX_free(context); }
};

Sha256Stream::Sha256Stream() : state_(std::make_unique<State>()) {
  EVP_DigestInit_ex(state_->context, EVP_sha256(), nullptr);
}

Sha256Stream::~Sha256Stream() = default;

void Sha256Stream::Update(absl::string_view data) { EVP_DigestUpdate(state_->context, data.data(), data.size()); }

std::string Sha256Stream::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(state_->context, digest, &size);
  return Hex(digest, size);
}

}  // namespace herd
