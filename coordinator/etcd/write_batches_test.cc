#include "coordinator/etcd/write_batches.h"

#include <gtest/gtest.h>

namespace herd::coordinator {
namespace {

std::vector<KeyValue> Puts(int count, size_t value_bytes) {
  std::vector<KeyValue> puts;
  for (int i = 0; i < count; ++i) puts.push_back({"k" + std::to_string(i), std::string(value_bytes, 'x')});
  return puts;
}

TEST(SplitIntoTxns, OneTransactionWhenItFits) {
  auto batches = SplitIntoTxns(Puts(128, 10), TxnLimits{});
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 1u);
  EXPECT_EQ(batches->at(0).size(), 128u);
}

TEST(SplitIntoTxns, CutsAtTheOperationLimitKeepingOrder) {
  auto batches = SplitIntoTxns(Puts(1001, 10), TxnLimits{});
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 8u);
  EXPECT_EQ(batches->at(0).front().key, "k0");
  EXPECT_EQ(batches->at(1).front().key, "k128");
  EXPECT_EQ(batches->back().size(), 1001u - 7 * 128);
  EXPECT_EQ(batches->back().back().key, "k1000");
}

TEST(SplitIntoTxns, CutsAtTheByteLimit) {
  TxnLimits limits;
  limits.max_bytes = 1000;
  // 2 + 400 bytes each: two fit, a third would pass 1000.
  auto batches = SplitIntoTxns(Puts(5, 400), limits);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 3u);
  EXPECT_EQ(batches->at(0).size(), 2u);
  EXPECT_EQ(batches->at(2).size(), 1u);
}

TEST(SplitIntoTxns, ARecordOverTheLimitIsRefusedByKey) {
  TxnLimits limits;
  limits.max_bytes = 100;
  std::vector<KeyValue> puts = {{"small", "x"}, {"/herd/jobs/huge", std::string(200, 'x')}};
  auto batches = SplitIntoTxns(puts, limits);
  ASSERT_FALSE(batches.ok());
  EXPECT_NE(batches.status().message().find("/herd/jobs/huge"), std::string::npos) << batches.status();
}

}  // namespace
}  // namespace herd::coordinator
