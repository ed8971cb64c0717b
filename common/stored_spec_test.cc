#include "common/stored_spec.h"

#include <gtest/gtest.h>

#include "common/job_spec.h"
#include "google/protobuf/unknown_field_set.h"

namespace herd {
namespace {

// A spec as a coordinator stored it while these fields were strings: the
// bytes protoc --encode wrote for this text with that herd.proto:
//   name: "stored"
//   model { name: "resnet_small" norm: "sync_batch" }
//   dataset { kind: "tokens" path: "/d/t.bin" dtype: "uint32" vocab_size: 300 sequence_length: 16 }
//   batch_size: 8
//   optimizer { name: "adamw" lr: 0.001 scale_lr: "sqrt" }
//   schedule { name: "cosine" }
//   sync { mode: "average" compression: "int8" every: 4 same_host_transport: "tcp"
//          shares: "throughput" outer { kind: "nesterov" lr: 0.7 } }
//   device: "cuda"
//   checkpoint { keep: 2 on_failure: "fail" }
//   on_nonfinite: "skip_step"
//   min_workers: 2
const std::string kStoredBeforeEnums(
    "\x0a\x06\x73\x74\x6f\x72\x65\x64\x12\x1a\x0a\x0c\x72\x65\x73\x6e\x65\x74\x5f\x73\x6d\x61\x6c\x6c"
    "\x4a\x0a\x73\x79\x6e\x63\x5f\x62\x61\x74\x63\x68\x1a\x1f\x0a\x06\x74\x6f\x6b\x65\x6e\x73\x12\x08"
    "\x2f\x64\x2f\x74\x2e\x62\x69\x6e\x30\x10\x3a\x06\x75\x69\x6e\x74\x33\x32\x40\xac\x02\x20\x08\x3a"
    "\x16\x0a\x05\x61\x64\x61\x6d\x77\x11\xfc\xa9\xf1\xd2\x4d\x62\x50\x3f\x42\x04\x73\x71\x72\x74\x42"
    "\x08\x0a\x06\x63\x6f\x73\x69\x6e\x65\x5a\x37\x0a\x07\x61\x76\x65\x72\x61\x67\x65\x22\x04\x69\x6e"
    "\x74\x38\x28\x04\x32\x13\x0a\x08\x6e\x65\x73\x74\x65\x72\x6f\x76\x11\x66\x66\x66\x66\x66\x66\xe6"
    "\x3f\x42\x03\x74\x63\x70\x62\x0a\x74\x68\x72\x6f\x75\x67\x68\x70\x75\x74\x60\x02\x72\x04\x63\x75"
    "\x64\x61\x82\x01\x08\x10\x02\x1a\x04\x66\x61\x69\x6c\x82\x02\x09\x73\x6b\x69\x70\x5f\x73\x74\x65"
    "\x70",
    193);

const google::protobuf::UnknownFieldSet& Unknown(const google::protobuf::Message& m) {
  return m.GetReflection()->GetUnknownFields(m);
}

v1::JobSpec Stored() {
  v1::JobSpec spec;
  EXPECT_TRUE(spec.ParseFromString(kStoredBeforeEnums));
  return spec;
}

TEST(StoredSpec, FormerStringsBecomeTheirEnums) {
  v1::JobSpec spec = Stored();
  ASSERT_TRUE(UpgradeStoredSpec(&spec).ok());
  EXPECT_EQ(spec.model().norm(), v1::NORM_SYNC_BATCH);
  EXPECT_EQ(spec.dataset().kind(), v1::DATASET_KIND_TOKENS);
  EXPECT_EQ(spec.dataset().dtype(), v1::TOKEN_DTYPE_UINT32);
  EXPECT_EQ(spec.optimizer().name(), v1::OPTIMIZER_NAME_ADAMW);
  EXPECT_EQ(spec.optimizer().scale_lr(), v1::SCALE_LR_SQRT);
  EXPECT_EQ(spec.schedule().name(), v1::SCHEDULE_NAME_COSINE);
  EXPECT_EQ(spec.sync().mode(), v1::SYNC_MODE_AVERAGE);
  EXPECT_EQ(spec.sync().compression(), v1::COMPRESSION_INT8);
  EXPECT_EQ(spec.sync().same_host_transport(), v1::SAME_HOST_TRANSPORT_TCP);
  EXPECT_EQ(spec.sync().shares(), v1::SHARES_THROUGHPUT);
  EXPECT_EQ(spec.sync().outer().kind(), v1::OUTER_KIND_NESTEROV);
  EXPECT_EQ(spec.checkpoint().on_failure(), v1::ON_FAILURE_FAIL);
  EXPECT_EQ(spec.device(), v1::DEVICE_CUDA);
  EXPECT_EQ(spec.on_nonfinite(), v1::ON_NONFINITE_SKIP_STEP);
  // The other fields as they were.
  EXPECT_EQ(spec.name(), "stored");
  EXPECT_EQ(spec.model().name(), "resnet_small");
  EXPECT_EQ(spec.dataset().path(), "/d/t.bin");
  EXPECT_EQ(spec.dataset().vocab_size(), 300);
  EXPECT_EQ(spec.sync().every(), 4);
  EXPECT_DOUBLE_EQ(spec.sync().outer().lr(), 0.7);
  EXPECT_EQ(spec.checkpoint().keep(), 2);
  EXPECT_EQ(spec.min_workers(), 2);
  // Nothing of the old strings is left to be written back.
  v1::JobSpec again;
  ASSERT_TRUE(again.ParseFromString(spec.SerializeAsString()));
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString());
  EXPECT_TRUE(Unknown(again).empty());
  EXPECT_TRUE(Unknown(again.sync()).empty());
  EXPECT_TRUE(Unknown(again.sync().outer()).empty());
}

// Without the conversion the stored choices would be lost: the defaults
// (allreduce, cpu, ...) would run a resumed job differently.
TEST(StoredSpec, WithoutTheConversionTheChoicesAreUnset) {
  v1::JobSpec spec = Stored();
  EXPECT_EQ(spec.sync().mode(), v1::SYNC_MODE_UNSPECIFIED);
  EXPECT_EQ(spec.device(), v1::DEVICE_UNSPECIFIED);
  EXPECT_FALSE(Unknown(spec.sync()).empty());
}

TEST(StoredSpec, CurrentSpecIsUnchanged) {
  v1::JobSpec spec = Stored();
  ASSERT_TRUE(UpgradeStoredSpec(&spec).ok());
  ApplyJobDefaults(&spec);
  const std::string before = spec.SerializeAsString();
  ASSERT_TRUE(UpgradeStoredSpec(&spec).ok());
  EXPECT_EQ(spec.SerializeAsString(), before);
}

TEST(StoredSpec, UnknownFormerStringNamesTheFieldAndTheChoices) {
  v1::JobSpec spec;
  v1::SyncSpec* sync = spec.mutable_sync();
  sync->GetReflection()->MutableUnknownFields(sync)->AddLengthDelimited(1, "gossip");
  absl::Status status = UpgradeStoredSpec(&spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "sync.mode: unknown value 'gossip' (expected one of: allreduce, average)");
}

}  // namespace
}  // namespace herd
