// Opens the store the coordinator's flags name, with what must live as long
// as it does: the state-dir lock (SQLite: one coordinator per database) or
// the etcd leadership (etcd: one leading coordinator per key prefix, the
// others wait here as standbys).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/exclusive_lock.h"
#include "common/rpc_options.h"
#include "coordinator/etcd/leadership.h"
#include "coordinator/state_store.h"

namespace herd::coordinator {

struct StoreOptions {
  std::string state_dir;  // SQLite in STATE_DIR/coordinator.db (the default)
  // --store: "" (use state_dir), sqlite:PATH or etcd://HOST:PORT[,...].
  std::string store;
  std::string etcd_prefix = "/herd/";
  int64_t etcd_lease_seconds = 5;
  // --etcd-cacert, --etcd-cert, --etcd-key: etcd over TLS when any is given
  // (mutual TLS with the certificate and key).
  TlsOptions etcd_tls;
  // --etcd-user and --etcd-password-file: etcd's user/password
  // authentication (both or neither).
  std::string etcd_user;
  std::string etcd_password_file;
  // The etcd leader key's value: the address clients reach this
  // coordinator at (followers send callers there).
  std::string identity;
  std::function<void()> on_leadership_lost;
  // etcd: who leads while this coordinator waits (EtcdLeadership's on_follow).
  std::function<void(const std::string& leader, const std::string& why)> on_follow;
};

struct OpenedStore {
  std::unique_ptr<StateStore> store;
  std::unique_ptr<ExclusiveLock> lock;         // SQLite
  std::unique_ptr<EtcdLeadership> leadership;  // etcd
};

// On etcd, blocks until this coordinator leads; fails at once when no
// member answers and some refused the TLS handshake, and when etcd refuses
// the user (wrong password, none where etcd requires one, no read or write
// permission on the prefix). An etcd that does not answer is waited for.
absl::StatusOr<OpenedStore> OpenStore(const StoreOptions& options);

}  // namespace herd::coordinator
