#include "coordinator/etcd/etcd_credentials.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/private_file.h"

namespace herd::coordinator {

absl::StatusOr<EtcdCredentials> ReadEtcdCredentials(const std::string& user, const std::string& password_file) {
  if (user.empty() && password_file.empty()) return EtcdCredentials{};
  if (password_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etcd-user ", user, " needs --etcd-password-file (a file holding its password)"));
  }
  if (user.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etcd-password-file ", password_file, " needs --etcd-user (the etcd user it is for)"));
  }
  auto text = ReadPrivateFile(password_file, "--etcd-password-file");
  if (!text.ok()) return text.status();
  std::string password = *std::move(text);
  if (absl::EndsWith(password, "\n")) password.pop_back();
  if (absl::EndsWith(password, "\r")) password.pop_back();
  if (password.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etcd-password-file ", password_file, ": the password for etcd user ", user, " is empty"));
  }
  return EtcdCredentials{user, std::move(password), password_file};
}

}  // namespace herd::coordinator
