#include "worker/train/sync/sync_config.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(SyncConfig, ParsesEveryFieldIntoTypedValues) {
  v1::SyncSpec spec;
  spec.set_mode(v1::SYNC_MODE_AVERAGE);
  spec.set_compression(v1::COMPRESSION_BF16);
  spec.set_same_host_transport(v1::SAME_HOST_TRANSPORT_TCP);
  spec.set_every(16);
  spec.set_warmup_steps(5);
  spec.set_first_bucket_mib(2);
  spec.set_bucket_cap_mib(10);
  spec.mutable_outer()->set_kind(v1::OUTER_KIND_NESTEROV);
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
  spec.set_mode(v1::SYNC_MODE_AVERAGE);
  spec.set_every(16);
  spec.set_fragments(4);
  spec.set_overlap(true);
  spec.set_compression(v1::COMPRESSION_INT8);
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

TEST(SyncConfig, CompressionSetsTheWireType) {
  const std::pair<v1::Compression, DataType> cases[] = {{v1::COMPRESSION_UNSPECIFIED, DataType::kFloat32},
                                                        {v1::COMPRESSION_NONE, DataType::kFloat32},
                                                        {v1::COMPRESSION_FP16, DataType::kFloat16},
                                                        {v1::COMPRESSION_BF16, DataType::kBFloat16}};
  for (const auto& [compression, wire] : cases) {
    v1::SyncSpec spec;
    spec.set_compression(compression);
    auto config = ParseSyncConfig(spec);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->wire_type, wire) << compression;
    EXPECT_FALSE(config->int8_wire);
  }
}

TEST(SyncConfig, UnknownValuesNameTheirField) {
  const std::vector<std::pair<std::string, std::function<void(v1::SyncSpec*)>>> cases = {
      // Numbers no value has (a newer client's): names are checked where YAML is read.
      {"sync.mode", [](v1::SyncSpec* s) { s->set_mode(v1::SyncMode(9)); }},
      {"sync.compression", [](v1::SyncSpec* s) { s->set_compression(v1::Compression(9)); }},
      {"sync.same_host_transport", [](v1::SyncSpec* s) { s->set_same_host_transport(v1::SameHostTransport(9)); }},
      {"sync.outer.kind", [](v1::SyncSpec* s) { s->mutable_outer()->set_kind(v1::OuterKind(9)); }},
      // Streaming settings are mode average's.
      {"sync.compression", [](v1::SyncSpec* s) { s->set_compression(v1::COMPRESSION_INT8); }},
      {"sync.fragments", [](v1::SyncSpec* s) { s->set_fragments(2); }},
      {"sync.overlap", [](v1::SyncSpec* s) { s->set_overlap(true); }},
      // Sharded optimizer state is mode allreduce's.
      {"sync.shard_optimizer",
       [](v1::SyncSpec* s) {
         s->set_mode(v1::SYNC_MODE_AVERAGE);
         s->set_shard_optimizer(true);
       }},
      {"sync.fragments",
       [](v1::SyncSpec* s) {
         s->set_mode(v1::SYNC_MODE_AVERAGE);
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
