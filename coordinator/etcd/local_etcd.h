// Real etcd members on loopback for tests: each in its own data folder
// under a fresh temporary folder, on free ports, killed (and the folder
// removed) when the LocalEtcd goes, also when a test fails.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc_options.h"
#include "etcd/auth/authpb/auth.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "tests/harness/process.h"

namespace herd::coordinator {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";

// Members serving their clients over TLS, as etcd under Kubernetes does.
struct LocalEtcdTls {
  std::string cert_file;  // the member's --cert-file (for 127.0.0.1)
  std::string key_file;   // its --key-file
  // --trusted-ca-file with --client-cert-auth: clients need a certificate
  // from this CA. Empty: any client may connect (server-verified TLS only).
  std::string client_ca_file;
  // How Start's readiness check connects (a client certificate when
  // client_ca_file is set).
  TlsOptions client;
};

// An etcd user for tests of authentication, with one permission: `access`
// on every key under `prefix`.
struct LocalEtcdUser {
  std::string name;
  std::string password;
  std::string prefix;
  authpb::Permission::Type access = authpb::Permission::READWRITE;
};

class LocalEtcd {
 public:
  // Whether Debian's etcd-server is installed (scripts/setup.sh installs it).
  static bool Installed();

  // Starts a cluster of `members` and returns once it answers writes.
  // With `tls`, client URLs are https (peers stay on plain http).
  // `flags`: more etcd flags for every member (e.g. --auth-token-ttl=2).
  static absl::StatusOr<std::unique_ptr<LocalEtcd>> Start(int members = 1, const LocalEtcdTls* tls = nullptr,
                                                          const std::vector<std::string>& flags = {});
  ~LocalEtcd();

  // Every member's client endpoint, "127.0.0.1:PORT", in member order.
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // SIGKILLs member `index` and waits for it to exit.
  void Kill(int index);
  // Starts a killed member `index` again on its data folder and ports, as a
  // supervisor would; it rejoins the cluster (returns at once).
  void Restart(int index);
  // Turns on etcd's authentication, as an operator does with etcdctl
  // (`user add`, `role add`, `role grant-permission`, `user grant-role`,
  // `auth enable`): a root user with `root_password`, and each of `users`
  // with a role of its own. Afterwards every call needs a user.
  absl::Status EnableAuth(const std::string& root_password, const std::vector<LocalEtcdUser>& users);
  // Turns etcd's authentication off and on again (`etcdctl auth disable`,
  // `auth enable`), as root: etcd forgets every token it has issued.
  absl::Status CycleAuth(const std::string& root_password);
  // Gives `user` a new password, as root (`etcdctl user passwd`). Tokens
  // already issued stay valid until they expire.
  absl::Status ChangePassword(const std::string& root_password, const std::string& user,
                              const std::string& password);
  // Waits until member `index` answers and its Raft has a leader (after
  // Restart), asking Maintenance.Status, which needs no user.
  absl::Status AwaitServing(int index) const;
  // The member that leads etcd's own Raft now, by index: the one whose
  // Maintenance.Status names itself leader (a killed member answers none).
  absl::StatusOr<int> RaftLeader() const;

 private:
  LocalEtcd() = default;
  absl::StatusOr<std::unique_ptr<etcdserverpb::Auth::Stub>> AsRoot(const std::string& root_password,
                                                                  std::string* root_token) const;

  std::string root_;
  TlsOptions client_tls_;
  std::vector<std::string> endpoints_;
  std::vector<std::vector<std::string>> argvs_;
  std::vector<std::unique_ptr<testing::Process>> members_;
};

}  // namespace herd::coordinator
