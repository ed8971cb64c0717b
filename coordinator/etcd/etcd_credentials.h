// The etcd user the coordinator authenticates as (etcd's v3 user/password
// authentication), from --etcd-user and --etcd-password-file. The password
// comes only from a file: on the command line `ps` would show it to anyone
// on the host.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace herd::coordinator {

struct EtcdCredentials {
  std::string user;
  std::string password;
  // Where the password came from: read again whenever the client
  // authenticates, so a rotated Secret's new password is used from the
  // next token on, without a restart. Empty: the password is fixed.
  std::string password_file;
  bool enabled() const { return !user.empty(); }
};

// Reads the password file for `user`; both empty means "no authentication".
// Errors name the flag and the file: a user without a password file, a
// password file without a user, a file that cannot be read or that group or
// others may read (common/private_file.h), and an empty password. The
// password is the file's content without one trailing line break (what
// `echo` or an editor leaves); any other byte, spaces too, is the password's.
absl::StatusOr<EtcdCredentials> ReadEtcdCredentials(const std::string& user, const std::string& password_file);

}  // namespace herd::coordinator
