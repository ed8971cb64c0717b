#include "common/job_spec_fuzz.h"

#include <google/protobuf/descriptor.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/job_spec_yaml.h"
#include "proto/herd.pb.h"

namespace herd {

absl::Status CheckNamesAField(const absl::Status& status) {
  if (status.ok()) return status;
  auto internal = [&](absl::string_view why) {
    return absl::InternalError(absl::StrCat(why, ": ", status.ToString()));
  };
  if (status.code() != absl::StatusCode::kInvalidArgument) return internal("a rejection must be INVALID_ARGUMENT");
  const absl::string_view message = status.message();
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos) return internal("no 'PATH: ' prefix");
  const absl::string_view path = message.substr(0, colon);
  if (path == "job spec") return absl::OkStatus();
  const bool unknown_field = absl::StartsWith(message.substr(colon + 2), "unknown field");
  const google::protobuf::Descriptor* descriptor = v1::JobSpec::descriptor();
  std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (descriptor == nullptr) return internal(absl::StrCat("'", path, "' goes below a scalar field"));
    const google::protobuf::FieldDescriptor* field = descriptor->FindFieldByName(std::string(parts[i]));
    if (field == nullptr) {
      if (last && unknown_field) return absl::OkStatus();
      return internal(absl::StrCat("'", parts[i], "' of '", path, "' is not a JobSpec field"));
    }
    descriptor = field->message_type();
  }
  return absl::OkStatus();
}

absl::Status FuzzJobSpecOnce(const std::string& text, bool* accepted) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text);
  absl::Status status = spec.status();
  if (spec.ok()) {
    ApplyJobDefaults(&*spec);
    status = ValidateJobSpec(*spec);
  }
  if (accepted != nullptr) *accepted = status.ok();
  return CheckNamesAField(status);
}

}  // namespace herd

// libFuzzer's entry point (scripts/fuzz_job_spec.sh builds it with clang).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::Status status = herd::FuzzJobSpecOnce(std::string(reinterpret_cast<const char*>(data), size));
  if (!status.ok()) __builtin_trap();  // a rejection that names no field
  return 0;
}
