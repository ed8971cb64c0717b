#include "coordinator/store_opening.h"

#include <glog/logging.h>

#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/private_dir.h"
#include "coordinator/etcd/etcd_access_check.h"
#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/sqlite_state_store.h"
#include "coordinator/store_spec.h"

namespace herd::coordinator {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<OpenedStore> OpenStateDir(const std::string& state_dir) {
  if (auto status = CreatePrivateDir(state_dir); !status.ok()) return status;
  // One coordinator per state dir: a second one would schedule the same
  // workers from a copy of the same jobs (split brain).
  auto lock = ExclusiveLock::Acquire((fs::path(state_dir) / "coordinator.lock").string());
  if (!lock.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("state dir ", state_dir, " is in use by another coordinator: ", lock.status().message()));
  }
  auto store = SqliteStateStore::Open((fs::path(state_dir) / "coordinator.db").string());
  if (!store.ok()) return store.status();
  OpenedStore opened;
  opened.store = *std::move(store);
  opened.lock = std::make_unique<ExclusiveLock>(*std::move(lock));
  return opened;
}

// sqlite:PATH. The lock is PATH with ".lock" for its ".db" (DIR/coordinator.db
// takes DIR/coordinator.lock, as --state-dir=DIR does).
absl::StatusOr<OpenedStore> OpenSqliteFile(const std::string& path) {
  const fs::path database(path);
  if (database.has_parent_path()) {
    if (auto status = CreatePrivateDir(database.parent_path().string()); !status.ok()) return status;
  }
  fs::path lock_path = database;
  lock_path.replace_extension(".lock");
  auto lock = ExclusiveLock::Acquire(lock_path.string());
  if (!lock.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path, " is in use by another coordinator: ", lock.status().message()));
  }
  auto store = SqliteStateStore::Open(path);
  if (!store.ok()) return store.status();
  OpenedStore opened;
  opened.store = *std::move(store);
  opened.lock = std::make_unique<ExclusiveLock>(*std::move(lock));
  return opened;
}

absl::Status EtcdTlsWithoutEtcd() {
  return absl::InvalidArgumentError("--etcd-cacert, --etcd-cert and --etcd-key are for --store=etcd:// only");
}

// The etcd-only flags given to a SQLite store.
absl::Status EtcdFlagsWithoutEtcd(const StoreOptions& options) {
  if (options.etcd_tls.enabled()) return EtcdTlsWithoutEtcd();
  if (!options.etcd_user.empty() || !options.etcd_password_file.empty()) {
    return absl::InvalidArgumentError("--etcd-user and --etcd-password-file are for --store=etcd:// only");
  }
  return absl::OkStatus();
}

absl::StatusOr<OpenedStore> OpenEtcd(const StoreSpec& spec, const StoreOptions& options) {
  auto prefix = NormalizeEtcdPrefix(options.etcd_prefix);
  if (!prefix.ok()) return prefix.status();
  auto credentials = ReadEtcdCredentials(options.etcd_user, options.etcd_password_file);
  if (!credentials.ok()) return credentials.status();
  auto client = EtcdClient::Connect(spec.etcd_endpoints, /*call_timeout_seconds=*/5, options.etcd_tls,
                                    *std::move(credentials));
  if (!client.ok()) return client.status();
  // Campaigning waits out an etcd that is down; a TLS misconfiguration or
  // a refused user would never mend, so they stop the start instead.
  if (options.etcd_tls.enabled()) {
    if (auto status = (*client)->CheckTlsHandshakes(); !status.ok()) return status;
  }
  if (auto status = CheckEtcdAccess(**client, *prefix); !status.ok()) return status;
  std::shared_ptr<EtcdClient> shared(*std::move(client));
  LeadershipOptions leadership;
  leadership.key = *prefix + "leader";
  leadership.identity = options.identity;
  leadership.lease_seconds = options.etcd_lease_seconds;
  // Whichever tells first, the keep-alive (lease gone) or a refused write,
  // steps down, once.
  auto once = std::make_shared<std::once_flag>();
  std::function<void()> step_down = [once, lost = options.on_leadership_lost] {
    if (lost) std::call_once(*once, lost);
  };
  leadership.on_lost = step_down;
  leadership.on_follow = options.on_follow;
  LOG(INFO) << "etcd store " << *prefix << " on " << options.store << ": campaigning for " << leadership.key;
  auto leading = EtcdLeadership::Campaign(shared, leadership);
  if (!leading.ok()) return leading.status();
  auto store = std::make_unique<EtcdStateStore>(shared, *prefix);
  store->FenceWith((*leading)->fence(), step_down);
  OpenedStore opened;
  opened.store = std::move(store);
  opened.leadership = *std::move(leading);
  return opened;
}

}  // namespace

absl::StatusOr<OpenedStore> OpenStore(const StoreOptions& options) {
  if (options.store.empty()) {
    if (options.state_dir.empty()) return absl::InvalidArgumentError("--state-dir is required");
    if (auto status = EtcdFlagsWithoutEtcd(options); !status.ok()) return status;
    return OpenStateDir(options.state_dir);
  }
  if (!options.state_dir.empty()) {
    return absl::InvalidArgumentError("--state-dir and --store name the same thing: give one of them");
  }
  auto spec = ParseStoreSpec(options.store);
  if (!spec.ok()) return spec.status();
  if (spec->kind == StoreSpec::Kind::kSqlite) {
    if (auto status = EtcdFlagsWithoutEtcd(options); !status.ok()) return status;
    return OpenSqliteFile(spec->sqlite_path);
  }
  return OpenEtcd(*spec, options);
}

}  // namespace herd::coordinator
