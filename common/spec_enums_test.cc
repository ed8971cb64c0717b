#include "common/spec_enums.h"

#include <gtest/gtest.h>

#include <set>

#include "proto/herd.pb.h"

namespace herd {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Every enum field under `d`, by YAML path.
void EnumFields(const Descriptor* d, const std::string& prefix,
                std::vector<std::pair<std::string, const FieldDescriptor*>>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string path = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) out->push_back({path, f});
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) EnumFields(f->message_type(), path, out);
  }
}

// The naming the YAML reader, the errors and `-o json` rely on holds for
// every closed set of the spec, and each name is distinct within its set.
TEST(SpecEnums, EveryJobSpecEnumFollowsTheNaming) {
  std::vector<std::pair<std::string, const FieldDescriptor*>> fields;
  EnumFields(v1::JobSpec::descriptor(), "", &fields);
  EXPECT_EQ(fields.size(), 14u);
  for (const auto& [path, field] : fields) {
    const auto* e = field->enum_type();
    EXPECT_TRUE(IsSpecEnum(e)) << path << " " << e->full_name();
    std::set<std::string> names;
    for (int i = 0; i < e->value_count(); ++i) {
      const std::string name = SpecEnumName(e, e->value(i)->number());
      EXPECT_TRUE(names.insert(name).second) << path << " repeats " << name;
      auto parsed = ParseSpecEnum(e, name, path);  // "" for the zero value: unset
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, e->value(i)->number());
      EXPECT_EQ(name.empty(), e->value(i)->number() == 0) << path;
    }
  }
}

TEST(SpecEnums, NamesAreLowerCaseWithoutThePrefix) {
  EXPECT_EQ(SpecName(v1::SYNC_MODE_AVERAGE), "average");
  EXPECT_EQ(SpecName(v1::SAME_HOST_TRANSPORT_SHM), "shm");
  EXPECT_EQ(SpecName(v1::NORM_SYNC_BATCH), "sync_batch");
  EXPECT_EQ(SpecName(v1::ON_NONFINITE_SKIP_STEP), "skip_step");
  EXPECT_EQ(SpecName(v1::SYNC_MODE_UNSPECIFIED), "");
  EXPECT_EQ(SpecName(v1::Compression(42)), "42");
  EXPECT_EQ(SpecEnumChoices(v1::Compression_descriptor()), "none, fp16, bf16, int8");
}

TEST(SpecEnums, OtherEnumsAreNotSpecEnums) {
  EXPECT_FALSE(IsSpecEnum(v1::JobState_descriptor()));
  EXPECT_FALSE(IsSpecEnum(v1::PeerFaultKind_descriptor()));
  EXPECT_FALSE(IsSpecEnum(v1::TrainerExitCode_descriptor()));
}

TEST(SpecEnums, UnknownNameNamesFieldAndChoices) {
  auto parsed = ParseSpecEnum(v1::SyncMode_descriptor(), "gossip", "sync.mode");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), "sync.mode: unknown value 'gossip' (expected one of: allreduce, average)");
  EXPECT_EQ(ParseSpecEnum(v1::SyncMode_descriptor(), "SYNC_MODE_AVERAGE", "sync.mode").status().message(),
            "sync.mode: unknown value 'SYNC_MODE_AVERAGE' (expected one of: allreduce, average)");
  // Control characters are escaped, never echoed to a terminal.
  EXPECT_EQ(ParseSpecEnum(v1::Device_descriptor(), "cu\x1b[2Jda", "device").status().message().find('\x1b'),
            std::string::npos);
}

}  // namespace
}  // namespace herd
