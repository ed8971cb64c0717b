#include "common/job_spec_yaml.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "common/control_chars.h"
#include "common/spec_enums.h"

namespace herd {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

bool IsPlainKey(const std::string& key) {
  if (key.empty()) return false;
  for (char c : key) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Which field names a message accepts, for "unknown key" errors.
std::string FieldNames(const google::protobuf::Descriptor* d) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->name());
  return absl::StrJoin(names, ", ");
}

template <typename T>
absl::StatusOr<T> Scalar(const YAML::Node& node, const std::string& path, const char* type) {
  if (!node.IsScalar()) return Bad(path, absl::StrCat("expected ", type));
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    return Bad(path, absl::StrCat("expected ", type, ", got '", node.Scalar(), "'"));
  }
}

absl::Status FillMessage(const YAML::Node& node, const std::string& path, Message* msg);

absl::Status FillField(const YAML::Node& value, const std::string& path, const FieldDescriptor* field,
                       Message* msg) {
  const auto* refl = msg->GetReflection();
  if (field->is_map()) {
    if (!value.IsMap()) return Bad(path, "expected a mapping");
    for (const auto& kv : value) {
      auto key = kv.first.as<std::string>();
      Message* entry = refl->AddMessage(msg, field);
      const auto* ed = entry->GetDescriptor();
      entry->GetReflection()->SetString(entry, ed->FindFieldByName("key"), key);
      if (auto s = FillField(kv.second, Join(path, key), ed->FindFieldByName("value"), entry); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (field->is_repeated()) {
    if (!value.IsSequence()) return Bad(path, "expected a list");
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string item = absl::StrCat(path, "[", i, "]");
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
        auto v = Scalar<int64_t>(value[i], item, "an integer");
        if (!v.ok()) return v.status();
        refl->AddInt64(msg, field, *v);
      } else if (field->type() == FieldDescriptor::TYPE_STRING) {
        auto v = Scalar<std::string>(value[i], item, "a string");
        if (!v.ok()) return v.status();
        refl->AddString(msg, field, *v);
      } else {
        return Bad(path, "unsupported list type");
      }
    }
    return absl::OkStatus();
  }
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING: {
      auto v = Scalar<std::string>(value, path, "a string");
      if (!v.ok()) return v.status();
      refl->SetString(msg, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      // A closed set, by its YAML name (common/spec_enums.h).
      auto v = Scalar<std::string>(value, path, "a string");
      if (!v.ok()) return v.status();
      auto number = ParseSpecEnum(field->enum_type(), *v, path);
      if (!number.ok()) return number.status();
      refl->SetEnumValue(msg, field, *number);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      // `field: auto` where the message has a bool `<field>_auto`: the
      // value is chosen at run time (sync.overlap_steps).
      const FieldDescriptor* automatic = msg->GetDescriptor()->FindFieldByName(field->name() + "_auto");
      if (automatic != nullptr && automatic->cpp_type() == FieldDescriptor::CPPTYPE_BOOL && value.IsScalar() &&
          value.Scalar() == "auto") {
        refl->SetBool(msg, automatic, true);
        return absl::OkStatus();
      }
      auto v = Scalar<int64_t>(value, path, automatic != nullptr ? "an integer or auto" : "an integer");
      if (!v.ok()) return v.status();
      refl->SetInt64(msg, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      auto v = Scalar<uint64_t>(value, path, "a non-negative integer");
      if (!v.ok()) return v.status();
      refl->SetUInt64(msg, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT32: {
      auto v = Scalar<int32_t>(value, path, "an integer");
      if (!v.ok()) return v.status();
      refl->SetInt32(msg, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      auto v = Scalar<double>(value, path, "a number");
      if (!v.ok()) return v.status();
      refl->SetDouble(msg, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      auto v = Scalar<bool>(value, path, "true or false");
      if (!v.ok()) return v.status();
      refl->SetBool(msg, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* sub = refl->MutableMessage(msg, field);
      if (value.IsScalar()) {
        // Shorthand: a scalar fills the sub-message's "name" or "kind" field.
        const auto* d = sub->GetDescriptor();
        const FieldDescriptor* f = d->FindFieldByName("name");
        if (f == nullptr) f = d->FindFieldByName("kind");
        if (f == nullptr) f = d->FindFieldByName("mode");
        if (f == nullptr) return Bad(path, "expected a mapping");
        return FillField(value, Join(path, f->name()), f, sub);
      }
      return FillMessage(value, path, sub);
    }
    default:
      return Bad(path, "unsupported field type");
  }
}

absl::Status FillMessage(const YAML::Node& node, const std::string& path, Message* msg) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) return Bad(path.empty() ? "job spec" : path, "expected a mapping");
  const auto* d = msg->GetDescriptor();
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Bad(path.empty() ? "job spec" : path, "keys must be strings");
    std::string key = kv.first.Scalar();
    const FieldDescriptor* field = d->FindFieldByName(key);
    if (field == nullptr) {
      const std::string known = absl::StrCat("(known: ", FieldNames(d), ")");
      if (IsPlainKey(key)) return Bad(Join(path, key), absl::StrCat("unknown field ", known));
      // A key such as "a.b" would make a misleading path: name the mapping.
      return Bad(path.empty() ? "job spec" : path,
                 absl::StrCat("unknown field '", EscapeControlChars(key), "' ", known));
    }
    if (auto s = FillField(kv.second, Join(path, key), field, msg); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: not valid YAML: ", e.what()));
  }
  v1::JobSpec spec;
  if (auto s = FillMessage(root, "", &spec); !s.ok()) return s;
  return spec;
}

absl::StatusOr<v1::JobSpec> ReadJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job file: ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto spec = ParseJobSpecYaml(buffer.str());
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace herd
