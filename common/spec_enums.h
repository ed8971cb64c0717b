// The job spec's closed sets (proto enums such as v1::SyncMode) by their
// YAML names: SYNC_MODE_AVERAGE is "average". The name is the value's, in
// lower case, behind the prefix its enum's zero value (*_UNSPECIFIED) has;
// the zero value means unset and has the name "".
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace herd {

// Whether `e` follows that naming (every enum of JobSpec does; JobState does not).
bool IsSpecEnum(const google::protobuf::EnumDescriptor* e);

// The YAML name of `number` in `e`: "" for the zero value, the number in
// decimal for one the enum does not define (a newer client's).
std::string SpecEnumName(const google::protobuf::EnumDescriptor* e, int number);

// "allreduce, average": every choice but the zero value, in declared order.
std::string SpecEnumChoices(const google::protobuf::EnumDescriptor* e);

// The number named `text`, or INVALID_ARGUMENT "<field>: unknown value
// '<text>' (expected one of: <choices>)". "" is the zero value (unset: the
// default), as an empty string was when these fields were strings.
absl::StatusOr<int> ParseSpecEnum(const google::protobuf::EnumDescriptor* e, const std::string& text,
                                  const std::string& field);

// SpecEnumName for a generated enum: SpecName(v1::SYNC_MODE_AVERAGE) is "average".
template <typename E>
std::string SpecName(E value) {
  return SpecEnumName(google::protobuf::GetEnumDescriptor<E>(), static_cast<int>(value));
}

// ParseSpecEnum for a generated enum: ParseSpecName<v1::SyncMode>("average", "sync.mode").
template <typename E>
absl::StatusOr<E> ParseSpecName(const std::string& text, const std::string& field) {
  absl::StatusOr<int> number = ParseSpecEnum(google::protobuf::GetEnumDescriptor<E>(), text, field);
  if (!number.ok()) return number.status();
  return static_cast<E>(*number);
}

}  // namespace herd
