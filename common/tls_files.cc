#include "common/tls_files.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio MemoryBio(const std::string& text) { return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size()))); }

std::string Describe(const std::string& flag, const std::string& path) { return absl::StrCat(flag, " ", path); }

absl::StatusOr<std::string> ReadWhole(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(Describe(flag, path), ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().empty()) return absl::InvalidArgumentError(absl::StrCat(Describe(flag, path), ": file is empty"));
  return buffer.str();
}

// The first certificate in `pem`, or null when it holds none.
std::unique_ptr<X509, X509Free> FirstCertificate(const std::string& pem) {
  Bio bio = MemoryBio(pem);
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

}  // namespace

absl::StatusOr<TlsPem> ReadTlsFiles(const std::string& ca_file, const std::string& cert_file,
                                    const std::string& key_file, const TlsFlagNames& names) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(cert_file.empty()
                                          ? absl::StrCat(names.key, " needs ", names.cert, " (its certificate)")
                                          : absl::StrCat(names.cert, " needs ", names.key, " (its private key)"));
  }
  TlsPem pem;
  if (!ca_file.empty()) {
    auto ca = ReadWhole(names.ca, ca_file);
    if (!ca.ok()) return ca.status();
    if (!FirstCertificate(*ca)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(names.ca, ca_file), ": holds no PEM certificate (BEGIN CERTIFICATE)"));
    }
    pem.ca = *std::move(ca);
  }
  if (cert_file.empty()) return pem;
  auto cert_text = ReadWhole(names.cert, cert_file);
  if (!cert_text.ok()) return cert_text.status();
  auto key_text = ReadWhole(names.key, key_file);
  if (!key_text.ok()) return key_text.status();
  auto cert = FirstCertificate(*cert_text);
  if (!cert) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(names.cert, cert_file), ": holds no PEM certificate (BEGIN CERTIFICATE)"));
  }
  Bio key_bio = MemoryBio(*key_text);
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!key) {
    return absl::InvalidArgumentError(absl::StrCat(
        Describe(names.key, key_file), ": holds no unencrypted PEM private key (BEGIN ... PRIVATE KEY)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(Describe(names.key, key_file),
                                                   " is not the private key of the certificate in ",
                                                   Describe(names.cert, cert_file)));
  }
  pem.cert = *std::move(cert_text);
  pem.key = *std::move(key_text);
  return pem;
}

}  // namespace herd
