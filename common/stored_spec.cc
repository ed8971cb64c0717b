#include "common/stored_spec.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/spec_enums.h"
#include "google/protobuf/unknown_field_set.h"

namespace herd {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Each enum field (by its YAML path) and the number its string had.
struct FormerString {
  const char* path;
  int number;
};
constexpr FormerString kFormerStrings[] = {
    {"model.norm", 9},
    {"dataset.kind", 1},
    {"dataset.dtype", 7},
    {"optimizer.name", 1},
    {"optimizer.scale_lr", 8},
    {"schedule.name", 1},
    {"sync.mode", 1},
    {"sync.compression", 4},
    {"sync.same_host_transport", 8},
    {"sync.shares", 12},
    {"sync.outer.kind", 1},
    {"checkpoint.on_failure", 3},
    {"device", 14},
    {"on_nonfinite", 32},
};

absl::Status Upgrade(const FormerString& former, v1::JobSpec* spec) {
  const std::vector<std::string> parts = absl::StrSplit(former.path, '.');
  Message* message = spec;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const FieldDescriptor* child = message->GetDescriptor()->FindFieldByName(parts[i]);
    if (!message->GetReflection()->HasField(*message, child)) return absl::OkStatus();
    message = message->GetReflection()->MutableMessage(message, child);
  }
  const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(parts.back());
  UnknownFieldSet* unknown = message->GetReflection()->MutableUnknownFields(message);
  for (int i = unknown->field_count() - 1; i >= 0; --i) {
    const UnknownField& old = unknown->field(i);
    if (old.number() != former.number || old.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    if (message->GetReflection()->GetEnumValue(*message, field) == 0) {
      auto number = ParseSpecEnum(field->enum_type(), old.length_delimited(), former.path);
      if (!number.ok()) return number.status();
      message->GetReflection()->SetEnumValue(message, field, *number);
    }
    unknown->DeleteSubrange(i, 1);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status UpgradeStoredSpec(v1::JobSpec* spec) {
  for (const FormerString& former : kFormerStrings) {
    if (auto s = Upgrade(former, spec); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace herd
