// Tests only: a test suite on one real etcd member, started once for the
// suite, with a folder for the suite's files, and the two ways onto the
// member the tests check: the store opened as the coordinator opens it, and
// the real herd-coordinator binary.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/etcd/local_etcd.h"
#include "coordinator/store_opening.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/process.h"

namespace herd::coordinator {

// A refused start comes within the client's call deadline (5 s), not after
// campaigning forever.
inline constexpr auto kFailFast = std::chrono::seconds(10);

class EtcdSuite : public ::testing::Test {
 protected:
  // For SetUpTestSuite: a fresh folder `name` under the test's temporary
  // folder (Dir, File), then the member `start` makes there. Nothing when etcd
  // is not installed: SetUp skips then.
  static void StartMember(const std::string& name,
                          const std::function<absl::StatusOr<std::unique_ptr<LocalEtcd>>()>& start) {
    if (!LocalEtcd::Installed()) return;
    dir_ = ::testing::TempDir() + "/" + name;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto etcd = start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }
  static void TearDownTestSuite() { etcd_.reset(); }
  void SetUp() override {
    if (!LocalEtcd::Installed()) {
      GTEST_SKIP() << kEtcdBinary << " is missing: install Debian's etcd-server (scripts/setup.sh does)";
    }
    ASSERT_NE(etcd_, nullptr) << "the suite's etcd did not start";
  }

  static const std::string& Dir() { return dir_; }
  static std::string File(const std::string& name) { return dir_ + "/" + name; }
  static LocalEtcd& Etcd() { return *etcd_; }
  static std::string Endpoint() { return etcd_->endpoints()[0]; }

  // The store on the member under `prefix`, with a short lease.
  static StoreOptions StoreOn(const std::string& prefix) {
    StoreOptions options;
    options.store = "etcd://" + Endpoint();
    options.etcd_prefix = prefix;
    options.identity = "coordinator-" + prefix;
    options.etcd_lease_seconds = 2;
    return options;
  }

  // Opens the store and expects it refused at once, with `code` and a
  // message holding every one of `words`.
  static void ExpectRefused(const StoreOptions& options, absl::StatusCode code,
                            const std::vector<std::string>& words) {
    const auto start = std::chrono::steady_clock::now();
    auto opened = OpenStore(options);
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(opened.ok()) << "the store opened";
    EXPECT_EQ(opened.status().code(), code) << opened.status();
    for (const std::string& word : words) EXPECT_THAT(opened.status().message(), ::testing::HasSubstr(word));
    EXPECT_LT(took, kFailFast) << opened.status();
  }

  // The real herd-coordinator on the member under `prefix`, with `more`
  // flags: it writes File(name + ".json") once ready, its log to
  // File(name + ".log").
  static std::unique_ptr<testing::Process> RunCoordinator(const std::string& name, const std::string& prefix,
                                                          const std::vector<std::string>& more) {
    std::vector<std::string> argv = {testing::LocalCluster::Binary("coordinator/herd-coordinator"),
                                     "--store=etcd://" + Endpoint(),
                                     "--etcd-prefix=" + prefix,
                                     "--etcd-lease-seconds=2",
                                     "--listen=127.0.0.1:0",
                                     "--metrics-listen=",
                                     "--insecure-no-auth",
                                     "--ready-file=" + File(name + ".json")};
    argv.insert(argv.end(), more.begin(), more.end());
    return std::make_unique<testing::Process>(argv, File(name + ".log"));
  }

 private:
  static inline std::string dir_;
  static inline std::unique_ptr<LocalEtcd> etcd_;
};

}  // namespace herd::coordinator
