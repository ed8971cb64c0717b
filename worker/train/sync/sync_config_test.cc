#include "worker/train/sync/sync_config.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(SyncConfig, ParsesEveryFieldIntoTypedValues) {
  v1::SyncSpec spec;
  spec.set_mode("average");
  spec.set_compression("bf16");
  spec.set_same_host_transport("tcp");
  spec.set_every(16);
  spec.set_warmup_steps(5);
  spec.set_first_bucket_mib(2);
  spec.set_bucket_cap_mib(10);
  spec.mutable_outer()->set_kind("nesterov");
  spec.mutable_outer()->set_lr(0.5);
  spec.mutable_outer()->set_momentum(0.8);
  auto config = ParseSyncConfig(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->mode, SyncMode::kAverage);
  EXPECT_EQ(config->wire_type, DataType::kBFloat16);
  EXPECT_EQ(config->same_host, SameHostTransport::kTcp);
  EXPECT_EQ(config->every, 16);
  EXPECT_EQ(config->warmup_steps, 5);
  EXPECT_EQ(config->first_bucket_mib, 2);
  EXPECT_EQ(config->bucket_cap_mib, 10);
  EXPECT_EQ(config->outer.kind, OuterKind::kNesterov);
  EXPECT_EQ(config->outer.lr, 0.5);
  EXPECT_EQ(config->outer.momentum, 0.8);
}

TEST(SyncConfig, ParsesStreamingAveraging) {
  v1::SyncSpec spec;
  spec.set_mode("average");
  spec.set_every(16);
  spec.set_fragments(4);
  spec.set_overlap(true);
  spec.set_compression("int8");
  auto config = ParseSyncConfig(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->fragments, 4);
  EXPECT_EQ(config->overlap_steps, 1);  // overlap: true is a merge one step later
  EXPECT_TRUE(config->int8_wire);
  EXPECT_EQ(config->wire_type, DataType::kFloat32);  // int8 is not a type the communicator sums
  EXPECT_TRUE(config->streaming());
  spec.set_fragments(1);
  spec.set_overlap(false);
  EXPECT_FALSE(ParseSyncConfig(spec)->streaming());
  spec.set_overlap_steps(6);
  config = ParseSyncConfig(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->overlap_steps, 6);
  EXPECT_TRUE(config->streaming());
}

TEST(SyncConfig, ParsesShardOptimizer) {
  v1::SyncSpec spec;
  EXPECT_FALSE(ParseSyncConfig(spec)->shard_optimizer);
  spec.set_shard_optimizer(true);
  auto config = ParseSyncConfig(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->shard_optimizer);
  EXPECT_EQ(config->mode, SyncMode::kAllReduce);
}

TEST(SyncConfig, EmptySpecMeansAllReduceDefaults) {
  auto config = ParseSyncConfig(v1::SyncSpec());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->mode, SyncMode::kAllReduce);
  EXPECT_EQ(config->wire_type, DataType::kFloat32);
  EXPECT_EQ(config->same_host, SameHostTransport::kSharedMemory);
  EXPECT_EQ(config->outer.kind, OuterKind::kNone);
}

TEST(SyncConfig, UnknownValuesNameTheirField) {
  const std::vector<std::pair<std::string, std::function<void(v1::SyncSpec*)>>> cases = {
      {"sync.mode", [](v1::SyncSpec* s) { s->set_mode("gossip"); }},
      {"sync.compression", [](v1::SyncSpec* s) { s->set_compression("int3"); }},
      {"sync.same_host_transport", [](v1::SyncSpec* s) { s->set_same_host_transport("rdma"); }},
      {"sync.outer.kind", [](v1::SyncSpec* s) { s->mutable_outer()->set_kind("adam"); }},
      // Streaming settings are mode average's.
      {"sync.compression", [](v1::SyncSpec* s) { s->set_compression("int8"); }},
      {"sync.fragments", [](v1::SyncSpec* s) { s->set_fragments(2); }},
      {"sync.overlap", [](v1::SyncSpec* s) { s->set_overlap(true); }},
      // Sharded optimizer state is mode allreduce's.
      {"sync.shard_optimizer",
       [](v1::SyncSpec* s) {
         s->set_mode("average");
         s->set_shard_optimizer(true);
       }},
      {"sync.fragments",
       [](v1::SyncSpec* s) {
         s->set_mode("average");
         s->set_every(2);
         s->set_fragments(3);
       }},
  };
  for (const auto& [field, mutate] : cases) {
    v1::SyncSpec spec;
    mutate(&spec);
    auto config = ParseSyncConfig(spec);
    ASSERT_FALSE(config.ok()) << field;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find(field), std::string::npos) << config.status();
  }
}

}  // namespace
}  // namespace herd
