#include "common/spec_enums.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/control_chars.h"

namespace herd {
namespace {

constexpr absl::string_view kUnspecified = "UNSPECIFIED";

// "SYNC_MODE_" for SyncMode: the zero value's name less UNSPECIFIED.
std::string Prefix(const google::protobuf::EnumDescriptor* e) {
  const google::protobuf::EnumValueDescriptor* zero = e->FindValueByNumber(0);
  if (zero == nullptr || !absl::EndsWith(zero->name(), kUnspecified)) return "";
  return std::string(zero->name().substr(0, zero->name().size() - kUnspecified.size()));
}

}  // namespace

bool IsSpecEnum(const google::protobuf::EnumDescriptor* e) {
  const std::string prefix = Prefix(e);
  if (prefix.empty() || !absl::EndsWith(prefix, "_")) return false;
  for (int i = 0; i < e->value_count(); ++i) {
    const std::string& name = e->value(i)->name();
    if (!absl::StartsWith(name, prefix) || name.size() == prefix.size()) return false;
  }
  return true;
}

std::string SpecEnumName(const google::protobuf::EnumDescriptor* e, int number) {
  if (number == 0) return "";
  const google::protobuf::EnumValueDescriptor* value = e->FindValueByNumber(number);
  if (value == nullptr) return absl::StrCat(number);
  return absl::AsciiStrToLower(absl::string_view(value->name()).substr(Prefix(e).size()));
}

std::string SpecEnumChoices(const google::protobuf::EnumDescriptor* e) {
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) {
    if (e->value(i)->number() != 0) names.push_back(SpecEnumName(e, e->value(i)->number()));
  }
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<int> ParseSpecEnum(const google::protobuf::EnumDescriptor* e, const std::string& text,
                                  const std::string& field) {
  for (int i = 0; i < e->value_count(); ++i) {
    const int number = e->value(i)->number();
    if (SpecEnumName(e, number) == text) return number;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown value '", EscapeControlChars(text),
                                                 "' (expected one of: ", SpecEnumChoices(e), ")"));
}

}  // namespace herd
