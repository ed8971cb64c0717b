// The state tests' stores: the same test runs on SQLite and on etcd (a real
// etcd member, started once per test process, each test under its own key
// prefix).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "coordinator/state_store.h"

namespace herd::coordinator {

enum class StoreKind { kSqlite, kEtcd };

// "Sqlite" / "Etcd": the suffix of a parametrized test's name.
std::string StoreKindName(const ::testing::TestParamInfo<StoreKind>& info);

// Why a kind cannot run here ("" when it can): etcd needs /usr/bin/etcd.
std::string StoreUnavailable(StoreKind kind);

// A test's own place in one store, emptied when made.
class TestStorePlace {
 public:
  // `name`: unique per test (a database file name, a key prefix).
  TestStorePlace(StoreKind kind, const std::string& name);

  // A new store on this place each call: a second one is what a restarted
  // coordinator sees. nullptr (with a test failure) when it cannot open.
  std::unique_ptr<StateStore> Open();

  // SQLite: the database file.
  const std::string& path() const { return path_; }

 private:
  StoreKind kind_;
  std::string path_;
  std::string prefix_;
};

}  // namespace herd::coordinator
