#include "coordinator/test_stores.h"

#include <cstdio>

#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/local_etcd.h"
#include "coordinator/sqlite_state_store.h"

namespace herd::coordinator {
namespace {

// One member for the whole test process; killed when the process exits
// (and by its parent-death signal if the process crashes).
LocalEtcd& SharedEtcd() {
  static std::unique_ptr<LocalEtcd> etcd = [] {
    auto started = LocalEtcd::Start(1);
    EXPECT_TRUE(started.ok()) << started.status();
    return started.ok() ? *std::move(started) : nullptr;
  }();
  if (etcd == nullptr) std::abort();  // reported above; no test can run on it
  return *etcd;
}

std::shared_ptr<EtcdClient> SharedEtcdClient() {
  auto client = EtcdClient::Connect(SharedEtcd().endpoints());
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::shared_ptr<EtcdClient>(*std::move(client)) : nullptr;
}

}  // namespace

std::string StoreKindName(const ::testing::TestParamInfo<StoreKind>& info) {
  return info.param == StoreKind::kSqlite ? "Sqlite" : "Etcd";
}

std::string StoreUnavailable(StoreKind kind) {
  if (kind == StoreKind::kEtcd && !LocalEtcd::Installed()) {
    return std::string(kEtcdBinary) + " is missing: install Debian's etcd-server (scripts/setup.sh does)";
  }
  return "";
}

TestStorePlace::TestStorePlace(StoreKind kind, const std::string& name) : kind_(kind) {
  if (kind_ == StoreKind::kSqlite) {
    path_ = ::testing::TempDir() + "/" + name + ".db";
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
    return;
  }
  prefix_ = "/test/" + name + "/";
  etcdserverpb::TxnRequest clear;
  etcdserverpb::DeleteRangeRequest* all = clear.add_success()->mutable_request_delete_range();
  all->set_key(prefix_);
  all->set_range_end(PrefixRangeEnd(prefix_));
  auto cleared = SharedEtcdClient()->Txn(clear);
  EXPECT_TRUE(cleared.ok()) << cleared.status();
}

std::unique_ptr<StateStore> TestStorePlace::Open() {
  if (kind_ == StoreKind::kSqlite) {
    auto store = SqliteStateStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  return std::make_unique<EtcdStateStore>(SharedEtcdClient(), prefix_);
}

}  // namespace herd::coordinator
