#include "common/job_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/control_chars.h"

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

// The first string field under `message` (by its YAML path) that holds a
// control character: such text would reach terminals through `herd list`.
absl::Status CheckNoControlChars(const google::protobuf::Message& message, const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string path = prefix.empty() ? field->name() : absl::StrCat(prefix, ".", field->name());
    if (field->is_repeated()) continue;  // the spec has no repeated fields
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      if (HasControlChars(reflection->GetString(message, field))) {
        return Bad(path, "must not contain control characters (escape sequences, newlines, tabs)");
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (auto s = CheckNoControlChars(reflection->GetMessage(message, field), path); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

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
  if (spec->device().empty()) spec->set_device("cpu");
  if (spec->threads() == 0) spec->set_threads(1);
  if (spec->log_interval_steps() == 0) spec->set_log_interval_steps(10);

  auto* opt = spec->mutable_optimizer();
  if (opt->name().empty()) opt->set_name("sgd");
  if (opt->lr() == 0) opt->set_lr(opt->name() == "sgd" ? 0.05 : 1e-3);
  if (opt->beta1() == 0) opt->set_beta1(0.9);
  if (opt->beta2() == 0) opt->set_beta2(0.999);
  if (opt->eps() == 0) opt->set_eps(1e-8);
  if (opt->name() == "adamw" && opt->weight_decay() == 0) opt->set_weight_decay(0.01);

  if (opt->scale_lr().empty()) opt->set_scale_lr("none");

  auto* schedule = spec->mutable_schedule();
  if (schedule->name().empty()) schedule->set_name("constant");
  if (schedule->name() == "step" && schedule->gamma() == 0) schedule->set_gamma(0.1);

  auto* sync = spec->mutable_sync();
  if (sync->mode().empty()) sync->set_mode("allreduce");
  if (sync->first_bucket_mib() == 0) sync->set_first_bucket_mib(1);
  if (sync->bucket_cap_mib() == 0) sync->set_bucket_cap_mib(25);
  if (sync->compression().empty()) sync->set_compression("none");
  if (sync->same_host_transport().empty()) sync->set_same_host_transport("shm");
  if (sync->mode() == "average" && sync->every() == 0) sync->set_every(8);
  if (sync->fragments() == 0) sync->set_fragments(1);
  if (sync->outer().kind().empty()) sync->mutable_outer()->set_kind("none");
  if (sync->outer().kind() == "nesterov") {
    if (sync->outer().lr() == 0) sync->mutable_outer()->set_lr(0.7);
    if (sync->outer().momentum() == 0) sync->mutable_outer()->set_momentum(0.9);
  }

  auto* dataset = spec->mutable_dataset();
  if (dataset->kind() == "synthetic") {
    if (dataset->synthetic_samples() == 0) dataset->set_synthetic_samples(4096);
    if (dataset->synthetic_features() == 0) dataset->set_synthetic_features(784);
    if (dataset->synthetic_classes() == 0) dataset->set_synthetic_classes(10);
  }
  if (dataset->kind() == "text" && dataset->sequence_length() == 0) dataset->set_sequence_length(64);

  if (spec->checkpoint().keep() == 0) spec->mutable_checkpoint()->set_keep(3);
  if (spec->checkpoint().on_failure().empty()) spec->mutable_checkpoint()->set_on_failure("continue");
  if (spec->on_nonfinite().empty()) spec->set_on_nonfinite("fail");
  if (spec->restart_budget() == 0) spec->set_restart_budget(3);
  if (spec->collective_timeout_seconds() == 0) spec->set_collective_timeout_seconds(30);
}

namespace {

// model.hidden/width/heads/layers/context/widths/norm: each for one built-in model,
// in sizes that build.
absl::Status CheckModelSizes(const v1::ModelSpec& model, const v1::DatasetSpec& dataset) {
  auto only = [&](const char* field, bool set, const char* owner) -> absl::Status {
    if (set && model.name() != owner) return Bad(field, absl::StrCat("only model ", owner, " uses it"));
    return absl::OkStatus();
  };
  const bool transformer_sizes = model.width() != 0 || model.heads() != 0 || model.layers() != 0 || model.context() != 0;
  if (auto s = only("model.hidden", model.hidden_size() > 0, "mlp"); !s.ok()) return s;
  if (auto s = only("model.widths", model.widths_size() > 0, "resnet_small"); !s.ok()) return s;
  if (auto s = only("model.norm", !model.norm().empty(), "resnet_small"); !s.ok()) return s;
  if (!model.norm().empty()) {
    if (auto s = CheckChoice("model.norm", model.norm(), {"group", "batch", "sync_batch"}); !s.ok()) return s;
  }
  if (transformer_sizes && model.name() != "char_transformer") {
    const char* field = model.width() != 0 ? "model.width" : model.heads() != 0 ? "model.heads"
                        : model.layers() != 0 ? "model.layers" : "model.context";
    return Bad(field, "only model char_transformer uses it");
  }
  if (model.hidden_size() > 16) return Bad("model.hidden", "at most 16 layers");
  for (int64_t h : model.hidden()) {
    if (h < 1 || h > 65536) return Bad("model.hidden", absl::StrCat("width ", h, " is not in [1, 65536]"));
  }
  if (model.widths_size() > 8) return Bad("model.widths", "at most 8 stages");
  for (int64_t w : model.widths()) {
    if (w < 8 || w > 4096 || w % 8 != 0) {
      return Bad("model.widths", absl::StrCat("width ", w, " is not a multiple of 8 in [8, 4096]"));
    }
  }
  if (model.width() < 0 || model.width() > 8192) return Bad("model.width", "must be in [1, 8192]");
  if (model.heads() < 0 || model.heads() > 256) return Bad("model.heads", "must be in [1, 256]");
  if (model.layers() < 0 || model.layers() > 128) return Bad("model.layers", "must be in [1, 128]");
  const int64_t width = model.width() > 0 ? model.width() : 128, heads = model.heads() > 0 ? model.heads() : 4;
  if (width % heads != 0) {
    return Bad("model.heads", absl::StrCat(heads, " heads do not divide model.width ", width));
  }
  if (model.context() < 0 || model.context() > 65536) return Bad("model.context", "must be in [1, 65536]");
  if (model.context() > 0 && model.context() < dataset.sequence_length()) {
    return Bad("model.context", absl::StrCat(model.context(), " is shorter than dataset.sequence_length ",
                                             dataset.sequence_length()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (auto s = CheckNoControlChars(spec, ""); !s.ok()) return s;
  if (spec.name().size() > 128) return Bad("name", "longer than 128 characters");
  const auto& model = spec.model();
  if (model.name().empty()) return Bad("model.name", "required");
  if (auto s = CheckChoice("model.name", model.name(), KnownModels()); !s.ok()) return s;
  if (model.name() == "torchscript" && model.path().empty()) {
    return Bad("model.path", "required when model.name is torchscript");
  }

  const auto& dataset = spec.dataset();
  if (dataset.kind().empty()) return Bad("dataset.kind", "required");
  if (auto s = CheckChoice("dataset.kind", dataset.kind(), {"idx", "text", "synthetic"}); !s.ok()) return s;
  if (dataset.kind() != "synthetic" && dataset.path().empty()) {
    return Bad("dataset.path", absl::StrCat("required for dataset.kind ", dataset.kind()));
  }
  if (dataset.synthetic_samples() < 0 || dataset.synthetic_features() < 0 || dataset.synthetic_classes() < 0) {
    return Bad("dataset", "synthetic sizes must be >= 0");
  }
  if (dataset.kind() == "synthetic" && dataset.synthetic_classes() < 2) {
    return Bad("dataset.synthetic_classes", "must be >= 2");
  }
  if (model.name() == "char_transformer" && dataset.kind() != "text") {
    return Bad("dataset.kind", "model char_transformer needs dataset.kind text");
  }
  if (dataset.kind() == "text" && model.name() != "char_transformer" && model.name() != "torchscript") {
    return Bad("model.name", "dataset.kind text needs model char_transformer or torchscript");
  }
  if (auto s = CheckModelSizes(model, dataset); !s.ok()) return s;
  if (dataset.kind() == "text" && (dataset.sequence_length() < 2 || dataset.sequence_length() > 4096)) {
    return Bad("dataset.sequence_length", "must be in [2, 4096]");
  }

  if (spec.batch_size() <= 0) return Bad("batch_size", absl::StrCat("must be > 0, got ", spec.batch_size()));
  if (spec.batch_size() > 1 << 20) return Bad("batch_size", "must be <= 1048576");
  if (spec.epochs() < 0) return Bad("epochs", "must be >= 0");
  if (spec.max_steps() < 0) return Bad("max_steps", "must be >= 0");
  if (spec.grad_accumulation() < 1) return Bad("grad_accumulation", "must be >= 1");
  if (spec.grad_clip_norm() < 0) return Bad("grad_clip_norm", "must be >= 0");
  if (spec.min_workers() < 1) return Bad("min_workers", "must be >= 1");
  if (spec.max_workers() < spec.min_workers()) {
    return Bad("max_workers", absl::StrCat("must be >= min_workers (", spec.min_workers(), ")"));
  }
  if (spec.max_workers() > 4096) return Bad("max_workers", "must be <= 4096");
  if (auto s = CheckChoice("device", spec.device(), {"cpu", "cuda"}); !s.ok()) return s;
  if (spec.bf16_autocast() && spec.device() != "cuda") return Bad("bf16_autocast", "needs device cuda");
  if (spec.threads() < 1 || spec.threads() > 256) return Bad("threads", "must be in [1, 256]");
  if (spec.restart_budget() < 0) return Bad("restart_budget", "must be >= 0");
  if (spec.priority() < kMinPriority || spec.priority() > kMaxPriority) {
    return Bad("priority", absl::StrCat("must be in [", kMinPriority, ", ", kMaxPriority, "], got ", spec.priority()));
  }
  if (spec.log_interval_steps() < 1) return Bad("log_interval_steps", "must be >= 1");
  if (!(spec.collective_timeout_seconds() >= 0.5 && spec.collective_timeout_seconds() <= 3600)) {
    return Bad("collective_timeout_seconds", "must be in [0.5, 3600]");
  }

  const auto& opt = spec.optimizer();
  if (auto s = CheckChoice("optimizer.name", opt.name(), {"sgd", "adam", "adamw"}); !s.ok()) return s;
  if (!(opt.lr() > 0)) return Bad("optimizer.lr", "must be > 0");
  if (opt.momentum() < 0 || opt.momentum() >= 1) return Bad("optimizer.momentum", "must be in [0, 1)");
  if (opt.weight_decay() < 0) return Bad("optimizer.weight_decay", "must be >= 0");
  if (opt.beta1() < 0 || opt.beta1() >= 1) return Bad("optimizer.beta1", "must be in [0, 1)");
  if (opt.beta2() < 0 || opt.beta2() >= 1) return Bad("optimizer.beta2", "must be in [0, 1)");
  if (auto s = CheckChoice("optimizer.scale_lr", opt.scale_lr(), {"none", "linear", "sqrt"}); !s.ok()) return s;

  const auto& schedule = spec.schedule();
  if (auto s = CheckChoice("schedule.name", schedule.name(), {"constant", "cosine", "step", "noam"}); !s.ok()) {
    return s;
  }
  if (schedule.name() == "noam") {
    if (schedule.d_model() <= 0) return Bad("schedule.d_model", "must be > 0 for schedule noam (the model width)");
    if (schedule.warmup_steps() <= 0) return Bad("schedule.warmup_steps", "must be > 0 for schedule noam");
  } else if (schedule.d_model() != 0) {
    return Bad("schedule.d_model", "only schedule noam uses it");
  }
  if (schedule.warmup_steps() < 0) return Bad("schedule.warmup_steps", "must be >= 0");
  if (schedule.min_lr() < 0) return Bad("schedule.min_lr", "must be >= 0");
  if (schedule.name() == "step" && schedule.step_size() <= 0) {
    return Bad("schedule.step_size", "must be > 0 for schedule step");
  }
  if (schedule.name() == "cosine" && spec.max_steps() == 0 && spec.epochs() == 0) {
    return Bad("schedule.name", "cosine needs epochs or max_steps to know its length");
  }

  const auto& sync = spec.sync();
  if (auto s = CheckChoice("sync.mode", sync.mode(), {"allreduce", "average"}); !s.ok()) return s;
  if (auto s = CheckChoice("sync.compression", sync.compression(), {"none", "fp16", "bf16", "int8"}); !s.ok()) {
    return s;
  }
  if (sync.compression() == "int8" && sync.mode() != "average") return Bad("sync.compression", "int8 needs sync.mode average");
  if (auto s = CheckChoice("sync.same_host_transport", sync.same_host_transport(), {"shm", "tcp"}); !s.ok()) {
    return s;
  }
  if (sync.first_bucket_mib() <= 0 || sync.first_bucket_mib() > 1024) return Bad("sync.first_bucket_mib", "must be in (0, 1024]");
  if (sync.bucket_cap_mib() <= 0 || sync.bucket_cap_mib() > 1024) return Bad("sync.bucket_cap_mib", "must be in (0, 1024]");
  if (sync.every() < 0) return Bad("sync.every", "must be >= 0");
  if (sync.mode() == "average" && sync.every() < 1) return Bad("sync.every", "must be >= 1 for mode average");
  if (sync.warmup_steps() < 0) return Bad("sync.warmup_steps", "must be >= 0");
  if (sync.fragments() < 0) return Bad("sync.fragments", "must be >= 1");
  if (sync.fragments() > 1 && sync.mode() != "average") return Bad("sync.fragments", "needs sync.mode average");
  if (sync.fragments() > sync.every() && sync.mode() == "average") {
    return Bad("sync.fragments", "must be <= sync.every (each fragment syncs once per `every` local steps)");
  }
  if (sync.overlap() && sync.mode() != "average") return Bad("sync.overlap", "needs sync.mode average");
  if (sync.shard_optimizer() && sync.mode() != "allreduce") {
    return Bad("sync.shard_optimizer", "needs sync.mode allreduce");
  }
  if (auto s = CheckChoice("sync.outer.kind", sync.outer().kind(), {"none", "nesterov"}); !s.ok()) return s;
  if (sync.outer().kind() != "none" && sync.mode() != "average") return Bad("sync.outer.kind", "needs sync.mode average");
  if (sync.outer().kind() == "nesterov" && !(sync.outer().lr() > 0)) return Bad("sync.outer.lr", "must be > 0");
  if (sync.outer().momentum() < 0 || sync.outer().momentum() >= 1) return Bad("sync.outer.momentum", "must be in [0, 1)");

  if (spec.checkpoint().interval_steps() < 0) return Bad("checkpoint.interval_steps", "must be >= 0");
  if (spec.checkpoint().keep() < 1) return Bad("checkpoint.keep", "must be >= 1");
  if (auto s = CheckChoice("checkpoint.on_failure", spec.checkpoint().on_failure(), {"continue", "fail"}); !s.ok()) {
    return s;
  }
  if (auto s = CheckChoice("on_nonfinite", spec.on_nonfinite(), {"fail", "skip_step"}); !s.ok()) return s;
  if (spec.eval().interval_steps() < 0) return Bad("eval.interval_steps", "must be >= 0");
  if (spec.eval().max_samples() < 0) return Bad("eval.max_samples", "must be >= 0");
  return absl::OkStatus();
}

}  // namespace herd
