#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/control_chars.h"
#include "common/labels.h"
#include "common/spec_enums.h"

namespace herd {
namespace {

bool OneOf(const std::string& value, const std::vector<std::string>& allowed) {
  return std::find(allowed.begin(), allowed.end(), value) != allowed.end();
}

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status CheckChoice(const std::string& field, const std::string& value,
                         const std::vector<std::string>& allowed) {
  if (OneOf(value, allowed)) return absl::OkStatus();
  return Bad(field, absl::StrCat("unknown value '", value, "' (expected one of: ",
                                 absl::StrJoin(allowed, ", "), ")"));
}

// A closed set's value (set by defaults, or required): one the enum defines.
template <typename E>
absl::Status CheckEnum(const std::string& field, E value) {
  const google::protobuf::EnumDescriptor* e = google::protobuf::GetEnumDescriptor<E>();
  if (value != 0 && e->FindValueByNumber(static_cast<int>(value)) != nullptr) return absl::OkStatus();
  return Bad(field, absl::StrCat("unknown value '", SpecEnumName(e, static_cast<int>(value)), "' (expected one of: ",
                                 SpecEnumChoices(e), ")"));
}

// The first scalar under `message` (by its YAML path) that no check below
// could judge: a string holding a control character (such text would reach
// terminals through `herd list`), or a NaN or infinite number (NaN passes
// every `x < 0` test, an infinity most upper bounds).
absl::Status CheckScalars(const google::protobuf::Message& message, const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string path = prefix.empty() ? field->name() : absl::StrCat(prefix, ".", field->name());
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string at = field->is_repeated() ? absl::StrCat(path, "[", i, "]") : path;
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_STRING: {
          const std::string text = field->is_repeated() ? reflection->GetRepeatedString(message, field, i)
                                                        : reflection->GetString(message, field);
          if (HasControlChars(text)) {
            return Bad(at, "must not contain control characters (escape sequences, newlines, tabs)");
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_DOUBLE:
        case FieldDescriptor::CPPTYPE_FLOAT: {
          double value = 0;
          if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
            value = field->is_repeated() ? reflection->GetRepeatedDouble(message, field, i)
                                         : reflection->GetDouble(message, field);
          } else {
            value = field->is_repeated() ? reflection->GetRepeatedFloat(message, field, i)
                                         : reflection->GetFloat(message, field);
          }
          if (!std::isfinite(value)) return Bad(at, absl::StrCat("must be a finite number, got ", value));
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE: {
          const auto& child = field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                                   : reflection->GetMessage(message, field);
          if (auto s = CheckScalars(child, at); !s.ok()) return s;
          break;
        }
        default:
          break;  // integers and bools: every one has its own range check below
      }
    }
  }
  return absl::OkStatus();
}

// "field: must be in [lo, hi], got value", for the integer fields whose
// extremes would overflow a step count or exhaust memory further on.
absl::Status CheckRange(const std::string& field, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return Bad(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
}

// Momenta and betas: [0, 1).
absl::Status CheckUnitInterval(const std::string& field, double value) {
  if (value >= 0 && value < 1) return absl::OkStatus();
  return Bad(field, absl::StrCat("must be in [0, 1), got ", value));
}

// Upper bounds (docs/job-spec.md): far above any real job, low enough that
// step counts (epochs x steps per epoch) stay far from int64 overflow.
constexpr int64_t kMaxSteps = 1'000'000'000'000;  // 1e12
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxSyntheticSamples = 1'000'000'000;
constexpr int64_t kMaxWidth = 1 << 20;  // features, classes, d_model
constexpr int64_t kMaxWorkers = 4096;
constexpr int64_t kMaxVocabulary = int64_t{1} << 32;  // every uint32 id

}  // namespace

const std::vector<std::string>& KnownModels() {
  static const auto* models = new std::vector<std::string>{
      "mlp", "mnist_cnn", "resnet_small", "char_transformer", "torchscript"};
  return *models;
}

void ApplyJobDefaults(v1::JobSpec* spec) {
  if (spec->name().empty()) spec->set_name(spec->model().name());
  if (spec->epochs() == 0 && spec->max_steps() == 0) spec->set_epochs(1);
  if (spec->grad_accumulation() == 0) spec->set_grad_accumulation(1);
  if (spec->min_workers() == 0) spec->set_min_workers(1);
  if (spec->max_workers() == 0) spec->set_max_workers(spec->min_workers());
  if (spec->device() == v1::DEVICE_UNSPECIFIED) spec->set_device(v1::DEVICE_CPU);
  if (spec->threads() == 0) spec->set_threads(1);
  if (spec->log_interval_steps() == 0) spec->set_log_interval_steps(10);

  auto* opt = spec->mutable_optimizer();
  if (opt->name() == v1::OPTIMIZER_NAME_UNSPECIFIED) opt->set_name(v1::OPTIMIZER_NAME_SGD);
  if (opt->lr() == 0) opt->set_lr(opt->name() == v1::OPTIMIZER_NAME_SGD ? 0.05 : 1e-3);
  if (opt->beta1() == 0) opt->set_beta1(0.9);
  if (opt->beta2() == 0) opt->set_beta2(0.999);
  if (opt->eps() == 0) opt->set_eps(1e-8);
  if (opt->name() == v1::OPTIMIZER_NAME_ADAMW && opt->weight_decay() == 0) opt->set_weight_decay(0.01);

  if (opt->scale_lr() == v1::SCALE_LR_UNSPECIFIED) opt->set_scale_lr(v1::SCALE_LR_NONE);

  auto* schedule = spec->mutable_schedule();
  if (schedule->name() == v1::SCHEDULE_NAME_UNSPECIFIED) schedule->set_name(v1::SCHEDULE_NAME_CONSTANT);
  if (schedule->name() == v1::SCHEDULE_NAME_STEP && schedule->gamma() == 0) schedule->set_gamma(0.1);

  ApplySyncDefaults(spec->mutable_sync());

  auto* dataset = spec->mutable_dataset();
  if (dataset->kind() == v1::DATASET_KIND_SYNTHETIC) {
    if (dataset->synthetic_samples() == 0) dataset->set_synthetic_samples(4096);
    if (dataset->synthetic_features() == 0) dataset->set_synthetic_features(784);
    if (dataset->synthetic_classes() == 0) dataset->set_synthetic_classes(10);
  }
  const bool sequences = dataset->kind() == v1::DATASET_KIND_TEXT || dataset->kind() == v1::DATASET_KIND_TOKENS;
  if (sequences && dataset->sequence_length() == 0) dataset->set_sequence_length(64);
  if (dataset->kind() == v1::DATASET_KIND_TOKENS && dataset->dtype() == v1::TOKEN_DTYPE_UNSPECIFIED) {
    dataset->set_dtype(v1::TOKEN_DTYPE_UINT16);
  }

  if (spec->checkpoint().keep() == 0) spec->mutable_checkpoint()->set_keep(3);
  if (spec->checkpoint().on_failure() == v1::ON_FAILURE_UNSPECIFIED) {
    spec->mutable_checkpoint()->set_on_failure(v1::ON_FAILURE_CONTINUE);
  }
  if (spec->on_nonfinite() == v1::ON_NONFINITE_UNSPECIFIED) spec->set_on_nonfinite(v1::ON_NONFINITE_FAIL);
  if (spec->restart_budget() == 0) spec->set_restart_budget(3);
  if (spec->collective_timeout_seconds() == 0) spec->set_collective_timeout_seconds(30);
}

namespace {

// global_batch_size fixes the optimizer's view of a step whatever the world
// size, so nothing else may scale with it: accumulation is derived from each
// rank's share, and the learning rate is not scaled by the world size.
absl::Status CheckGlobalBatch(const v1::JobSpec& spec) {
  const int64_t global = spec.global_batch_size();
  if (global == 0) return absl::OkStatus();
  if (auto s = CheckRange("global_batch_size", global, 1, int64_t{1} << 30); !s.ok()) return s;
  if (global < spec.min_workers()) {
    return Bad("global_batch_size", absl::StrCat(global, " is below min_workers (", spec.min_workers(),
                                                 "): every rank needs at least one sample per step"));
  }
  // With islands the step is split among the islands first
  // (IslandShares), so no world size splits it evenly in general.
  const bool islands = !spec.sync().islands_by().empty();
  if (!islands && global % spec.min_workers() != 0) {
    return Bad("global_batch_size", absl::StrCat(global, " is not divisible by min_workers (", spec.min_workers(),
                                                 "): the minimum world could not split it evenly"));
  }
  if (spec.grad_accumulation() > 1) {
    return Bad("grad_accumulation", absl::StrCat("must be 1 (or unset) with global_batch_size, got ",
                                                 spec.grad_accumulation(),
                                                 ": each rank accumulates as many micro-batches as its share needs"));
  }
  if (spec.optimizer().scale_lr() != v1::SCALE_LR_UNSPECIFIED && spec.optimizer().scale_lr() != v1::SCALE_LR_NONE) {
    return Bad("optimizer.scale_lr", absl::StrCat("must be none with global_batch_size, got ",
                                                  SpecName(spec.optimizer().scale_lr()),
                                                  ": the global batch does not change with the world size"));
  }
  // With islands, an island of one rank may take the whole step.
  const int64_t largest_share = islands ? global : (global + spec.min_workers() - 1) / spec.min_workers();
  const int64_t micro_batches = (largest_share + spec.batch_size() - 1) / spec.batch_size();
  if (micro_batches > 65536) {
    return Bad("global_batch_size",
               absl::StrCat(global, " needs ", micro_batches, " micro-batches of batch_size ", spec.batch_size(),
                            islands ? " on a rank alone in its island" : " per rank at min_workers ",
                            islands ? "" : absl::StrCat(spec.min_workers()), " (at most 65536)"));
  }
  return absl::OkStatus();
}

// model.hidden/width/heads/layers/context/widths/norm: each for one built-in model,
// in sizes that build.
absl::Status CheckModelSizes(const v1::ModelSpec& model, const v1::DatasetSpec& dataset) {
  // Each value in its range first, so an absurd one is named as such.
  for (int64_t h : model.hidden()) {
    if (h < 1 || h > 65536) return Bad("model.hidden", absl::StrCat("width ", h, " is not in [1, 65536]"));
  }
  for (int64_t w : model.widths()) {
    if (w < 8 || w > 4096 || w % 8 != 0) {
      return Bad("model.widths", absl::StrCat("width ", w, " is not a multiple of 8 in [8, 4096]"));
    }
  }
  if (auto s = CheckRange("model.width", model.width(), 0, 8192); !s.ok()) return s;
  if (auto s = CheckRange("model.heads", model.heads(), 0, 256); !s.ok()) return s;
  if (auto s = CheckRange("model.layers", model.layers(), 0, 128); !s.ok()) return s;
  if (auto s = CheckRange("model.context", model.context(), 0, 65536); !s.ok()) return s;
  if (auto s = CheckRange("model.vocab_size", model.vocab_size(), 0, kMaxVocabulary); !s.ok()) return s;

  auto only = [&](const char* field, bool set, const char* owner) -> absl::Status {
    if (set && model.name() != owner) return Bad(field, absl::StrCat("only model ", owner, " uses it"));
    return absl::OkStatus();
  };
  if (auto s = only("model.hidden", model.hidden_size() > 0, "mlp"); !s.ok()) return s;
  if (auto s = only("model.widths", model.widths_size() > 0, "resnet_small"); !s.ok()) return s;
  const bool norm_set = model.norm() != v1::NORM_UNSPECIFIED;
  if (auto s = only("model.norm", norm_set, "resnet_small"); !s.ok()) return s;
  if (norm_set) {
    if (auto s = CheckEnum("model.norm", model.norm()); !s.ok()) return s;
  }
  const std::pair<const char*, int64_t> transformer_sizes[] = {
      {"model.width", model.width()}, {"model.heads", model.heads()},
      {"model.layers", model.layers()}, {"model.context", model.context()}, {"model.vocab_size", model.vocab_size()}};
  for (const auto& [field, value] : transformer_sizes) {
    if (value != 0 && model.name() != "char_transformer") {
      return Bad(field, absl::StrCat("only model char_transformer uses it, got ", value));
    }
  }
  if (model.hidden_size() > 16) return Bad("model.hidden", "at most 16 layers");
  if (model.widths_size() > 8) return Bad("model.widths", "at most 8 stages");
  const int64_t width = model.width() > 0 ? model.width() : 128, heads = model.heads() > 0 ? model.heads() : 4;
  if (width % heads != 0) {
    return Bad("model.heads", absl::StrCat(heads, " heads do not divide model.width ", width));
  }
  const int64_t data_vocabulary = dataset.kind() == v1::DATASET_KIND_TOKENS ? dataset.vocab_size() : 256;
  if (model.vocab_size() > 0 && model.vocab_size() < data_vocabulary) {
    return Bad("model.vocab_size", absl::StrCat(model.vocab_size(), " is smaller than the dataset's vocabulary of ",
                                                data_vocabulary));
  }
  if (model.context() > 0 && model.context() < dataset.sequence_length()) {
    return Bad("model.context", absl::StrCat(model.context(), " is shorter than dataset.sequence_length ",
                                             dataset.sequence_length()));
  }
  return absl::OkStatus();
}

// The fields each dataset kind reads: required ones set, and none of
// another kind's (a field that would be ignored is a mistake worth naming).
absl::Status CheckDatasetFiles(const v1::DatasetSpec& dataset) {
  const v1::DatasetKind kind = dataset.kind();
  if (auto s = CheckRange("dataset.vocab_size", dataset.vocab_size(), 0, kMaxVocabulary); !s.ok()) return s;
  if (auto s = CheckRange("dataset.num_classes", dataset.num_classes(), 0, kMaxWidth); !s.ok()) return s;
  struct Owned {
    const char* field;
    bool set;
    v1::DatasetKind owner;  // the one dataset.kind that reads it
  };
  constexpr v1::DatasetKind kTokens = v1::DATASET_KIND_TOKENS, kNpy = v1::DATASET_KIND_NPY;
  const Owned owned[] = {{"dataset.dtype", dataset.dtype() != v1::TOKEN_DTYPE_UNSPECIFIED, kTokens},
                         {"dataset.vocab_size", dataset.vocab_size() != 0, kTokens},
                         {"dataset.validation_path", !dataset.validation_path().empty(), kTokens},
                         {"dataset.inputs", !dataset.inputs().empty(), kNpy},
                         {"dataset.targets", !dataset.targets().empty(), kNpy},
                         {"dataset.validation_inputs", !dataset.validation_inputs().empty(), kNpy},
                         {"dataset.validation_targets", !dataset.validation_targets().empty(), kNpy},
                         {"dataset.num_classes", dataset.num_classes() != 0, kNpy}};
  for (const Owned& o : owned) {
    if (o.set && kind != o.owner) {
      return Bad(o.field, absl::StrCat("only dataset.kind ", SpecName(o.owner), " uses it"));
    }
  }
  if (kind == kNpy) {
    if (!dataset.path().empty()) return Bad("dataset.path", "dataset.kind npy reads dataset.inputs and targets");
    if (dataset.inputs().empty()) return Bad("dataset.inputs", "required for dataset.kind npy (a .npy file)");
    if (dataset.targets().empty()) return Bad("dataset.targets", "required for dataset.kind npy (a .npy file)");
    if (dataset.validation_inputs().empty() != dataset.validation_targets().empty()) {
      return Bad(dataset.validation_inputs().empty() ? "dataset.validation_inputs" : "dataset.validation_targets",
                 "set both validation files or neither");
    }
    if (dataset.num_classes() == 1) return Bad("dataset.num_classes", "must be >= 2");
    return absl::OkStatus();
  }
  if (kind != v1::DATASET_KIND_SYNTHETIC && dataset.path().empty()) {
    return Bad("dataset.path", absl::StrCat("required for dataset.kind ", SpecName(kind)));
  }
  if (kind == kTokens) {
    if (auto s = CheckEnum("dataset.dtype", dataset.dtype()); !s.ok()) return s;
    if (dataset.vocab_size() < 2) return Bad("dataset.vocab_size", "required for dataset.kind tokens (at least 2)");
    if (dataset.dtype() == v1::TOKEN_DTYPE_UINT16 && dataset.vocab_size() > 65536) {
      return Bad("dataset.vocab_size", absl::StrCat(dataset.vocab_size(),
                                                    " ids do not fit dataset.dtype uint16 (at most 65536)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (auto s = CheckScalars(spec, ""); !s.ok()) return s;
  if (spec.name().size() > 128) return Bad("name", "longer than 128 characters");
  const auto& model = spec.model();
  if (model.name().empty()) return Bad("model.name", "required");
  if (auto s = CheckChoice("model.name", model.name(), KnownModels()); !s.ok()) return s;
  if (model.name() == "torchscript" && model.path().empty()) {
    return Bad("model.path", "required when model.name is torchscript");
  }

  const auto& dataset = spec.dataset();
  if (dataset.kind() == v1::DATASET_KIND_UNSPECIFIED) return Bad("dataset.kind", "required");
  if (auto s = CheckEnum("dataset.kind", dataset.kind()); !s.ok()) return s;
  if (auto s = CheckDatasetFiles(dataset); !s.ok()) return s;
  if (auto s = CheckRange("dataset.synthetic_samples", dataset.synthetic_samples(), 0, kMaxSyntheticSamples); !s.ok()) {
    return s;
  }
  if (auto s = CheckRange("dataset.synthetic_features", dataset.synthetic_features(), 0, kMaxWidth); !s.ok()) return s;
  if (auto s = CheckRange("dataset.synthetic_classes", dataset.synthetic_classes(), 0, kMaxWidth); !s.ok()) return s;
  if (auto s = CheckRange("dataset.sequence_length", dataset.sequence_length(), 0, 4096); !s.ok()) return s;
  if (dataset.kind() == v1::DATASET_KIND_SYNTHETIC && dataset.synthetic_classes() < 2) {
    return Bad("dataset.synthetic_classes", "must be >= 2");
  }
  const bool sequences = dataset.kind() == v1::DATASET_KIND_TEXT || dataset.kind() == v1::DATASET_KIND_TOKENS;
  if (model.name() == "char_transformer" && !sequences) {
    return Bad("dataset.kind", "model char_transformer needs dataset.kind text or tokens");
  }
  if (sequences && model.name() != "char_transformer" && model.name() != "torchscript") {
    return Bad("model.name",
               absl::StrCat("dataset.kind ", SpecName(dataset.kind()), " needs model char_transformer or torchscript"));
  }
  if (auto s = CheckModelSizes(model, dataset); !s.ok()) return s;
  if (sequences && (dataset.sequence_length() < 2 || dataset.sequence_length() > 4096)) {
    return Bad("dataset.sequence_length", "must be in [2, 4096]");
  }

  if (spec.batch_size() <= 0) return Bad("batch_size", absl::StrCat("must be > 0, got ", spec.batch_size()));
  if (spec.batch_size() > 1 << 20) {
    return Bad("batch_size", absl::StrCat("must be <= 1048576, got ", spec.batch_size()));
  }
  if (auto s = CheckRange("epochs", spec.epochs(), 0, kMaxEpochs); !s.ok()) return s;
  if (auto s = CheckRange("max_steps", spec.max_steps(), 0, kMaxSteps); !s.ok()) return s;
  if (auto s = CheckRange("grad_accumulation", spec.grad_accumulation(), 1, 65536); !s.ok()) return s;
  if (spec.grad_clip_norm() < 0) {
    return Bad("grad_clip_norm", absl::StrCat("must be >= 0, got ", spec.grad_clip_norm()));
  }
  if (auto s = CheckRange("min_workers", spec.min_workers(), 1, kMaxWorkers); !s.ok()) return s;
  if (spec.max_workers() < spec.min_workers()) {
    return Bad("max_workers",
               absl::StrCat("must be >= min_workers (", spec.min_workers(), "), got ", spec.max_workers()));
  }
  if (spec.max_workers() > kMaxWorkers) {
    return Bad("max_workers", absl::StrCat("must be <= ", kMaxWorkers, ", got ", spec.max_workers()));
  }
  if (auto s = CheckGlobalBatch(spec); !s.ok()) return s;
  if (auto s = CheckEnum("device", spec.device()); !s.ok()) return s;
  if (spec.bf16_autocast() && spec.device() != v1::DEVICE_CUDA) return Bad("bf16_autocast", "needs device cuda");
  if (auto s = CheckRange("threads", spec.threads(), 1, 256); !s.ok()) return s;
  if (auto s = CheckRange("restart_budget", spec.restart_budget(), 0, 10000); !s.ok()) return s;
  if (spec.priority() < kMinPriority || spec.priority() > kMaxPriority) {
    return Bad("priority", absl::StrCat("must be in [", kMinPriority, ", ", kMaxPriority, "], got ", spec.priority()));
  }
  if (auto s = CheckRange("log_interval_steps", spec.log_interval_steps(), 1, kMaxSteps); !s.ok()) return s;
  if (!(spec.collective_timeout_seconds() >= 0.5 && spec.collective_timeout_seconds() <= 3600)) {
    return Bad("collective_timeout_seconds", "must be in [0.5, 3600]");
  }

  const auto& opt = spec.optimizer();
  if (auto s = CheckEnum("optimizer.name", opt.name()); !s.ok()) return s;
  if (!(opt.lr() > 0)) return Bad("optimizer.lr", absl::StrCat("must be > 0, got ", opt.lr()));
  if (auto s = CheckUnitInterval("optimizer.momentum", opt.momentum()); !s.ok()) return s;
  if (opt.weight_decay() < 0) {
    return Bad("optimizer.weight_decay", absl::StrCat("must be >= 0, got ", opt.weight_decay()));
  }
  if (auto s = CheckUnitInterval("optimizer.beta1", opt.beta1()); !s.ok()) return s;
  if (auto s = CheckUnitInterval("optimizer.beta2", opt.beta2()); !s.ok()) return s;
  if (!(opt.eps() > 0 && opt.eps() <= 1)) {
    return Bad("optimizer.eps", absl::StrCat("must be in (0, 1], got ", opt.eps()));
  }
  if (auto s = CheckEnum("optimizer.scale_lr", opt.scale_lr()); !s.ok()) return s;

  const auto& schedule = spec.schedule();
  if (auto s = CheckEnum("schedule.name", schedule.name()); !s.ok()) return s;
  if (auto s = CheckRange("schedule.d_model", schedule.d_model(), 0, kMaxWidth); !s.ok()) return s;
  if (auto s = CheckRange("schedule.warmup_steps", schedule.warmup_steps(), 0, kMaxSteps); !s.ok()) return s;
  if (auto s = CheckRange("schedule.step_size", schedule.step_size(), 0, kMaxSteps); !s.ok()) return s;
  if (schedule.name() == v1::SCHEDULE_NAME_NOAM) {
    if (schedule.d_model() <= 0) return Bad("schedule.d_model", "must be > 0 for schedule noam (the model width)");
    if (schedule.warmup_steps() <= 0) return Bad("schedule.warmup_steps", "must be > 0 for schedule noam");
  } else if (schedule.d_model() != 0) {
    return Bad("schedule.d_model", "only schedule noam uses it");
  }
  if (schedule.min_lr() < 0) return Bad("schedule.min_lr", absl::StrCat("must be >= 0, got ", schedule.min_lr()));
  if (schedule.gamma() < 0) return Bad("schedule.gamma", absl::StrCat("must be >= 0, got ", schedule.gamma()));
  if (schedule.name() == v1::SCHEDULE_NAME_STEP && schedule.step_size() <= 0) {
    return Bad("schedule.step_size", "must be > 0 for schedule step");
  }
  if (schedule.name() == v1::SCHEDULE_NAME_STEP && schedule.gamma() <= 0) {
    return Bad("schedule.gamma", "must be > 0 for schedule step");
  }
  if (schedule.name() == v1::SCHEDULE_NAME_COSINE && spec.max_steps() == 0 && spec.epochs() == 0) {
    return Bad("schedule.name", "cosine needs epochs or max_steps to know its length");
  }

  if (auto s = ValidateSyncSpec(spec.sync()); !s.ok()) return s;
  if (spec.sync().min_workers_per_island() > spec.max_workers()) {
    return Bad("sync.min_workers_per_island",
               absl::StrCat("must be <= max_workers (", spec.max_workers(), "), got ",
                            spec.sync().min_workers_per_island(), ": no island could ever have that many ranks"));
  }
  if (auto s = ValidatePlacement(spec.placement()); !s.ok()) return s;

  if (auto s = CheckRange("checkpoint.interval_steps", spec.checkpoint().interval_steps(), 0, kMaxSteps); !s.ok()) {
    return s;
  }
  if (auto s = CheckRange("checkpoint.keep", spec.checkpoint().keep(), 1, 10000); !s.ok()) return s;
  if (auto s = CheckEnum("checkpoint.on_failure", spec.checkpoint().on_failure()); !s.ok()) return s;
  if (auto s = CheckEnum("on_nonfinite", spec.on_nonfinite()); !s.ok()) return s;
  if (auto s = CheckRange("eval.interval_steps", spec.eval().interval_steps(), 0, kMaxSteps); !s.ok()) return s;
  if (auto s = CheckRange("eval.max_samples", spec.eval().max_samples(), 0, kMaxSyntheticSamples); !s.ok()) return s;
  return absl::OkStatus();
}

void ApplySyncDefaults(v1::SyncSpec* sync) {
  if (sync->mode() == v1::SYNC_MODE_UNSPECIFIED) sync->set_mode(v1::SYNC_MODE_ALLREDUCE);
  if (sync->first_bucket_mib() == 0) sync->set_first_bucket_mib(1);
  if (sync->bucket_cap_mib() == 0) sync->set_bucket_cap_mib(25);
  if (sync->compression() == v1::COMPRESSION_UNSPECIFIED) sync->set_compression(v1::COMPRESSION_NONE);
  if (sync->same_host_transport() == v1::SAME_HOST_TRANSPORT_UNSPECIFIED) {
    sync->set_same_host_transport(v1::SAME_HOST_TRANSPORT_SHM);
  }
  const bool average = sync->mode() == v1::SYNC_MODE_AVERAGE;
  if (average && sync->every() == 0) sync->set_every(8);
  if (sync->fragments() == 0) sync->set_fragments(1);
  if (sync->overlap() && sync->overlap_steps() == 0) sync->set_overlap_steps(1);
  if (sync->shares() == v1::SHARES_UNSPECIFIED) sync->set_shares(v1::SHARES_EQUAL);
  if (!sync->islands_by().empty() && sync->min_workers_per_island() == 0) sync->set_min_workers_per_island(1);
  if (sync->outer().kind() == v1::OUTER_KIND_UNSPECIFIED) sync->mutable_outer()->set_kind(v1::OUTER_KIND_NONE);
  if (sync->outer().kind() == v1::OUTER_KIND_NESTEROV) {
    if (sync->outer().lr() == 0) sync->mutable_outer()->set_lr(0.7);
    if (sync->outer().momentum() == 0) sync->mutable_outer()->set_momentum(0.9);
  }
}

absl::Status ValidateSyncSpec(const v1::SyncSpec& sync) {
  if (auto s = CheckEnum("sync.mode", sync.mode()); !s.ok()) return s;
  const bool average = sync.mode() == v1::SYNC_MODE_AVERAGE;
  if (auto s = CheckEnum("sync.compression", sync.compression()); !s.ok()) return s;
  if (sync.compression() == v1::COMPRESSION_INT8 && !average) {
    return Bad("sync.compression", "int8 needs sync.mode average");
  }
  if (auto s = CheckEnum("sync.same_host_transport", sync.same_host_transport()); !s.ok()) return s;
  if (sync.first_bucket_mib() <= 0 || sync.first_bucket_mib() > 1024) return Bad("sync.first_bucket_mib", "must be in (0, 1024]");
  if (sync.bucket_cap_mib() <= 0 || sync.bucket_cap_mib() > 1024) return Bad("sync.bucket_cap_mib", "must be in (0, 1024]");
  if (auto s = CheckRange("sync.every", sync.every(), 0, 1'000'000); !s.ok()) return s;
  if (average && sync.every() < 1) return Bad("sync.every", "must be >= 1 for mode average");
  if (auto s = CheckRange("sync.warmup_steps", sync.warmup_steps(), 0, kMaxSteps); !s.ok()) return s;
  if (auto s = CheckRange("sync.fragments", sync.fragments(), 0, 1024); !s.ok()) return s;
  if (sync.fragments() > 1 && !average) return Bad("sync.fragments", "needs sync.mode average");
  if (sync.fragments() > sync.every() && average) {
    return Bad("sync.fragments", "must be <= sync.every (each fragment syncs once per `every` local steps)");
  }
  if (sync.overlap() && !average) return Bad("sync.overlap", "needs sync.mode average");
  if (auto s = CheckRange("sync.overlap_steps", sync.overlap_steps(), 0, 1'000'000); !s.ok()) return s;
  if (sync.overlap_steps() > 0 && !average) return Bad("sync.overlap_steps", "needs sync.mode average");
  if (sync.overlap() && sync.overlap_steps() > 1) {
    return Bad("sync.overlap", absl::StrCat("is overlap_steps: 1, but sync.overlap_steps is ", sync.overlap_steps(),
                                            ": set only sync.overlap_steps"));
  }
  if (sync.overlap_steps_auto()) {
    if (!average) return Bad("sync.overlap_steps", "auto needs sync.mode average");
    if (sync.overlap() || sync.overlap_steps() > 0) {
      return Bad("sync.overlap_steps", "is auto, but sync.overlap or a number is set too: set only one");
    }
  }
  if (average && sync.overlap_steps() > sync.every()) {
    return Bad("sync.overlap_steps", absl::StrCat("must be at most sync.every (", sync.every(), "), got ",
                                                  sync.overlap_steps(), ": a fragment's round is merged before its next one"));
  }
  if (auto s = CheckEnum("sync.shares", sync.shares()); !s.ok()) return s;
  if (sync.shard_optimizer() && sync.mode() != v1::SYNC_MODE_ALLREDUCE) {
    return Bad("sync.shard_optimizer", "needs sync.mode allreduce");
  }
  if (auto s = CheckEnum("sync.outer.kind", sync.outer().kind()); !s.ok()) return s;
  if (sync.outer().kind() != v1::OUTER_KIND_NONE && !average) return Bad("sync.outer.kind", "needs sync.mode average");
  if (sync.outer().lr() < 0) return Bad("sync.outer.lr", absl::StrCat("must be >= 0, got ", sync.outer().lr()));
  if (sync.outer().kind() == v1::OUTER_KIND_NESTEROV && !(sync.outer().lr() > 0)) {
    return Bad("sync.outer.lr", "must be > 0");
  }
  if (auto s = CheckUnitInterval("sync.outer.momentum", sync.outer().momentum()); !s.ok()) return s;
  if (!sync.islands_by().empty()) {
    if (auto s = ValidateLabelKey("sync.islands_by", sync.islands_by()); !s.ok()) return s;
    if (!average) {
      return Bad("sync.islands_by", "needs sync.mode average (islands average their parameters across sites)");
    }
    // Each shard's cross group would weigh only its own ranks' samples,
    // and an island's shards must keep one schedule.
    if (sync.shares() == v1::SHARES_THROUGHPUT) {
      return Bad("sync.islands_by", "does not support sync.shares throughput yet");
    }
  }
  if (auto s = CheckRange("sync.min_workers_per_island", sync.min_workers_per_island(), 0, kMaxWorkers); !s.ok()) {
    return s;
  }
  if (sync.min_workers_per_island() > 0 && sync.islands_by().empty()) {
    return Bad("sync.min_workers_per_island", "needs sync.islands_by (it is the fewest ranks an island may have)");
  }
  return absl::OkStatus();
}

absl::Status ValidatePlacement(const v1::PlacementSpec& placement) {
  return ValidateLabels("placement.require", Labels(placement.require().begin(), placement.require().end()));
}

int64_t SamplesPerStep(const v1::JobSpec& spec, int64_t world_size) {
  if (spec.global_batch_size() > 0) return spec.global_batch_size();
  return std::max<int64_t>(1, world_size) * spec.batch_size() * std::max<int64_t>(1, spec.grad_accumulation());
}

}  // namespace herd
