#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/models/builtin_models.h"
#include "worker/models/deterministic_init.h"

namespace herd {
namespace {

struct Builtin {
  const char* name;
  absl::StatusOr<std::shared_ptr<LogitsModule>> (*make)(const v1::ModelSpec&, const ModelInputInfo&);
};

constexpr Builtin kBuiltins[] = {
    {"mlp", &MakeMlp},
    {"mnist_cnn", &MakeMnistCnn},
    {"resnet_small", &MakeResnetSmall},
    {"char_transformer", &MakeCharTransformer},
};

absl::Status ValidateInputInfo(const std::string& model, const ModelInputInfo& info) {
  bool positive = !info.sample_shape.empty();
  for (int64_t d : info.sample_shape) positive = positive && d > 0;
  if (!positive) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.name ", model, ": the dataset's sample shape ", ShapeString(info.sample_shape),
                     " is empty"));
  }
  if (info.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.name ", model, ": the dataset has ", info.num_classes, " classes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> CreateBuiltin(const Builtin& builtin, const v1::ModelSpec& spec,
                                                     const ModelInputInfo& info, uint64_t seed) {
  if (absl::Status valid = ValidateInputInfo(builtin.name, info); !valid.ok()) return valid;
  absl::StatusOr<std::shared_ptr<LogitsModule>> module = builtin.make(spec, info);
  if (!module.ok()) return module.status();
  if (absl::Status init = InitializeParameters(**module, seed); !init.ok()) return init;
  (*module)->ChooseLayouts();  // after init: uniform_ fills in memory order
  return std::unique_ptr<Model>(new ModuleModel(builtin.name, std::move(*module)));
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) { return absl::StrCat("{", absl::StrJoin(shape, ", "), "}"); }

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const v1::ModelSpec& spec, const ModelInputInfo& info,
                                                   uint64_t seed) {
  try {
    if (spec.name() == "torchscript") return LoadTorchScriptModel(spec.path(), info.num_classes);
    for (const Builtin& builtin : kBuiltins) {
      if (spec.name() == builtin.name) return CreateBuiltin(builtin, spec, info, seed);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("building model ", spec.name(), ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building model ", spec.name(), ": ", e.what()));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model.name '", spec.name(), "': expected mlp, mnist_cnn, resnet_small, char_transformer or torchscript"));
}

}  // namespace herd
