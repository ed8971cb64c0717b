#include "common/job_spec.h"

#include <gtest/gtest.h>

#include "common/job_spec_yaml.h"
#include "common/spec_enums.h"

namespace herd {
namespace {

constexpr char kGoodYaml[] = R"(
name: fmnist
model: mnist_cnn
dataset: {kind: idx, path: /usr/share/datasets/fashion-mnist}
batch_size: 64
epochs: 2
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {name: cosine, warmup_steps: 10}
min_workers: 2
seed: 7
eval: {interval_steps: 100}
)";

v1::JobSpec GoodSpec() {
  auto spec = ParseJobSpecYaml(kGoodYaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyJobDefaults(&*spec);
  return *spec;
}

TEST(JobSpecYaml, ParsesFieldsAndShorthand) {
  auto spec = GoodSpec();
  EXPECT_EQ(spec.name(), "fmnist");
  EXPECT_EQ(spec.model().name(), "mnist_cnn");
  EXPECT_EQ(spec.dataset().path(), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(spec.batch_size(), 64);
  EXPECT_DOUBLE_EQ(spec.optimizer().momentum(), 0.9);
  EXPECT_EQ(spec.schedule().warmup_steps(), 10);
  EXPECT_EQ(spec.seed(), 7u);
  EXPECT_EQ(spec.max_workers(), 2);  // defaults to min_workers
  EXPECT_EQ(spec.sync().mode(), v1::SYNC_MODE_ALLREDUCE);
  EXPECT_EQ(spec.optimizer().name(), v1::OPTIMIZER_NAME_SGD);
  EXPECT_EQ(spec.schedule().name(), v1::SCHEDULE_NAME_COSINE);
  EXPECT_EQ(spec.dataset().kind(), v1::DATASET_KIND_IDX);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpecYaml, ParsesSchedulingFields) {
  auto spec = ParseJobSpecYaml("model: mlp\npriority: -5\npreemptible: true\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->priority(), -5);
  EXPECT_TRUE(spec->preemptible());
  EXPECT_EQ(GoodSpec().priority(), 0);  // the default
  EXPECT_FALSE(GoodSpec().preemptible());
}

// cuda_graphs is accepted on any device: where steps cannot be captured
// (cpu among others) the trainer runs them eagerly and says why.
TEST(JobSpecYaml, ParsesCudaGraphs) {
  auto spec = ParseJobSpecYaml(std::string(kGoodYaml) + "cuda_graphs: true\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->cuda_graphs());
  ApplyJobDefaults(&*spec);
  EXPECT_NE(spec->device(), v1::DEVICE_CUDA);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_FALSE(GoodSpec().cuda_graphs());  // the default
  EXPECT_FALSE(ParseJobSpecYaml("model: mlp\ncuda_graphs: maybe\n").ok());
}

TEST(JobSpecYaml, UnknownKeyIsNamed) {
  auto spec = ParseJobSpecYaml("model: mlp\nbatchsize: 3\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("batchsize: unknown field"), std::string::npos) << spec.status();
  auto nested = ParseJobSpecYaml("optimizer: {name: sgd, learning_rate: 1}\n");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("optimizer.learning_rate"), std::string::npos) << nested.status();
}

TEST(JobSpecYaml, WrongTypeIsNamed) {
  auto spec = ParseJobSpecYaml("batch_size: lots\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("batch_size: expected an integer"), std::string::npos) << spec.status();
}

TEST(JobSpecYaml, OverlapStepsTakesAutoOrANumber) {
  auto automatic = ParseJobSpecYaml(std::string(kGoodYaml) + "sync: {mode: average, every: 16, overlap_steps: auto}\n");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_TRUE(automatic->sync().overlap_steps_auto());
  EXPECT_EQ(automatic->sync().overlap_steps(), 0);
  ApplyJobDefaults(&*automatic);
  EXPECT_TRUE(ValidateJobSpec(*automatic).ok()) << ValidateJobSpec(*automatic);

  auto number = ParseJobSpecYaml("model: mlp\nsync: {mode: average, overlap_steps: 4}\n");
  ASSERT_TRUE(number.ok()) << number.status();
  EXPECT_FALSE(number->sync().overlap_steps_auto());
  EXPECT_EQ(number->sync().overlap_steps(), 4);

  auto word = ParseJobSpecYaml("model: mlp\nsync: {mode: average, overlap_steps: fast}\n");
  ASSERT_FALSE(word.ok());
  EXPECT_NE(word.status().message().find("sync.overlap_steps: expected an integer or auto, got 'fast'"),
            std::string::npos)
      << word.status();
  // Only a field with an `_auto` sibling takes auto.
  auto every = ParseJobSpecYaml("model: mlp\nsync: {mode: average, every: auto}\n");
  ASSERT_FALSE(every.ok());
  EXPECT_NE(every.status().message().find("sync.every: expected an integer, got 'auto'"), std::string::npos)
      << every.status();
}

TEST(JobSpecValidate, OverlapStepsAutoNeedsAverageAndNoOtherOverlap) {
  auto allreduce = ParseJobSpecYaml(std::string(kGoodYaml) + "sync: {overlap_steps: auto}\n");
  ASSERT_TRUE(allreduce.ok());
  ApplyJobDefaults(&*allreduce);
  EXPECT_NE(ValidateJobSpec(*allreduce).message().find("sync.overlap_steps: auto needs sync.mode average"),
            std::string::npos)
      << ValidateJobSpec(*allreduce);
  auto both = ParseJobSpecYaml(std::string(kGoodYaml) + "sync: {mode: average, overlap: true, overlap_steps: auto}\n");
  ASSERT_TRUE(both.ok());
  ApplyJobDefaults(&*both);
  EXPECT_NE(ValidateJobSpec(*both).message().find("sync.overlap_steps: is auto, but sync.overlap"), std::string::npos)
      << ValidateJobSpec(*both);
}

TEST(JobSpecYaml, MalformedYamlIsRejected) {
  auto spec = ParseJobSpecYaml("model: [unclosed\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
}

struct BadCase {
  const char* field;
  void (*mutate)(v1::JobSpec*);
};

TEST(JobSpecValidate, AcceptsNoamAndLrScaling) {
  auto spec = GoodSpec();
  spec.mutable_schedule()->set_name(v1::SCHEDULE_NAME_NOAM);
  spec.mutable_schedule()->set_d_model(128);
  spec.mutable_schedule()->set_warmup_steps(400);
  spec.mutable_optimizer()->set_scale_lr(v1::SCALE_LR_SQRT);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpecYaml, ParsesListsOfSizes) {
  auto spec = ParseJobSpecYaml("name: big\nmodel: {name: mlp, hidden: [4096, 2048, 512]}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::vector<int64_t>(spec->model().hidden().begin(), spec->model().hidden().end()),
            (std::vector<int64_t>{4096, 2048, 512}));
  auto bad = ParseJobSpecYaml("name: big\nmodel: {name: mlp, hidden: [64, wide]}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.hidden[1]"), std::string::npos) << bad.status();
}

TEST(JobSpecValidate, TransformerSizesAreChecked) {
  auto spec = ParseJobSpecYaml(R"(
name: sized
model: {name: char_transformer, width: 96, heads: 3, layers: 4, context: 128}
dataset: {kind: text, path: /tmp/corpus.txt, sequence_length: 64}
batch_size: 8
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyJobDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  spec->mutable_model()->set_heads(5);
  EXPECT_EQ(ValidateJobSpec(*spec).message().rfind("model.heads:", 0), 0u) << ValidateJobSpec(*spec);
  spec->mutable_model()->set_heads(3);
  spec->mutable_model()->set_context(32);
  EXPECT_EQ(ValidateJobSpec(*spec).message().rfind("model.context:", 0), 0u) << ValidateJobSpec(*spec);
}

// The message of ValidateJobSpec for `yaml` after defaults ("" when valid).
std::string Verdict(const std::string& yaml) {
  auto spec = ParseJobSpecYaml(yaml);
  if (!spec.ok()) return std::string(spec.status().message());
  ApplyJobDefaults(&*spec);
  return std::string(ValidateJobSpec(*spec).message());
}

TEST(JobSpecValidate, TokenDatasetFields) {
  const std::string model = "model: {name: char_transformer, vocab_size: 50304}\nbatch_size: 8\n";
  EXPECT_EQ(Verdict(model + "dataset: {kind: tokens, path: /d/train.bin, vocab_size: 50257}\n"), "");
  auto spec = ParseJobSpecYaml(model + "dataset: {kind: tokens, path: /d/train.bin, vocab_size: 50257}\n");
  ASSERT_TRUE(spec.ok());
  ApplyJobDefaults(&*spec);
  EXPECT_EQ(spec->dataset().dtype(), v1::TOKEN_DTYPE_UINT16);
  EXPECT_EQ(spec->dataset().sequence_length(), 64);
  EXPECT_EQ(Verdict(model + "dataset: {kind: tokens, path: /d/t.bin, vocab_size: 100000, dtype: uint32, "
                            "validation_path: /d/v.bin}\n"),
            "model.vocab_size: 50304 is smaller than the dataset's vocabulary of 100000");
  EXPECT_EQ(Verdict(model + "dataset: {kind: tokens, path: /d/t.bin}\n"),
            "dataset.vocab_size: required for dataset.kind tokens (at least 2)");
  EXPECT_EQ(Verdict(model + "dataset: {kind: tokens, path: /d/t.bin, vocab_size: 70000}\n"),
            "dataset.vocab_size: 70000 ids do not fit dataset.dtype uint16 (at most 65536)");
  EXPECT_EQ(Verdict(model + "dataset: {kind: tokens, path: /d/t.bin, vocab_size: 500, dtype: int8}\n")
            ,
            "dataset.dtype: unknown value 'int8' (expected one of: uint16, uint32)");
  EXPECT_EQ(Verdict(model + "dataset: {kind: tokens, vocab_size: 500}\n"),
            "dataset.path: required for dataset.kind tokens");
  EXPECT_EQ(Verdict("model: mlp\nbatch_size: 8\ndataset: {kind: tokens, path: /d/t.bin, vocab_size: 500}\n"),
            "model.name: dataset.kind tokens needs model char_transformer or torchscript");
  EXPECT_EQ(Verdict("model: mlp\nbatch_size: 8\ndataset: {kind: synthetic, vocab_size: 500}\n"),
            "dataset.vocab_size: only dataset.kind tokens uses it");
  EXPECT_EQ(Verdict("model: {name: mlp, vocab_size: 300}\nbatch_size: 8\ndataset: {kind: synthetic}\n"),
            "model.vocab_size: only model char_transformer uses it, got 300");
}

TEST(JobSpecValidate, NpyDatasetFields) {
  const std::string head = "model: mlp\nbatch_size: 8\n";
  EXPECT_EQ(Verdict(head + "dataset: {kind: npy, inputs: /d/x.npy, targets: /d/y.npy}\n"), "");
  EXPECT_EQ(Verdict(head + "dataset: {kind: npy, inputs: /d/x.npy, targets: /d/y.npy, "
                           "validation_inputs: /d/vx.npy, validation_targets: /d/vy.npy, num_classes: 10}\n"),
            "");
  EXPECT_EQ(Verdict(head + "dataset: {kind: npy, inputs: /d/x.npy}\n"),
            "dataset.targets: required for dataset.kind npy (a .npy file)");
  EXPECT_EQ(Verdict(head + "dataset: {kind: npy, inputs: /d/x.npy, targets: /d/y.npy, validation_inputs: /d/v}\n"),
            "dataset.validation_targets: set both validation files or neither");
  EXPECT_EQ(Verdict(head + "dataset: {kind: npy, path: /d, inputs: /d/x.npy, targets: /d/y.npy}\n"),
            "dataset.path: dataset.kind npy reads dataset.inputs and targets");
  EXPECT_EQ(Verdict(head + "dataset: {kind: idx, path: /d, inputs: /d/x.npy}\n"),
            "dataset.inputs: only dataset.kind npy uses it");
  EXPECT_EQ(Verdict("model: char_transformer\nbatch_size: 8\n"
                    "dataset: {kind: npy, inputs: /d/x.npy, targets: /d/y.npy}\n"),
            "dataset.kind: model char_transformer needs dataset.kind text or tokens");
}

TEST(JobSpecValidate, GlobalBatchSizeDivisibleIntoTheMinimumWorldIsAccepted) {
  auto spec = GoodSpec();
  spec.set_min_workers(3);
  spec.set_max_workers(5);
  spec.set_global_batch_size(96);  // 32 per rank at 3; 5 ranks split it unevenly, which is fine
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.sync().shares(), v1::SHARES_EQUAL);  // the default
  spec.mutable_sync()->set_shares(v1::SHARES_THROUGHPUT);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpecValidate, NamesTheBadField) {
  const BadCase cases[] = {
      {"model.name", [](v1::JobSpec* s) { s->mutable_model()->set_name("gpt9"); }},
      {"model.path", [](v1::JobSpec* s) { s->mutable_model()->set_name("torchscript"); }},
      {"batch_size", [](v1::JobSpec* s) { s->set_batch_size(0); }},
      {"dataset.kind", [](v1::JobSpec* s) { s->mutable_dataset()->clear_kind(); }},  // required
      {"dataset.path", [](v1::JobSpec* s) { s->mutable_dataset()->clear_path(); }},
      {"max_workers", [](v1::JobSpec* s) { s->set_max_workers(1); }},
      {"optimizer.name", [](v1::JobSpec* s) { s->mutable_optimizer()->set_name(v1::OptimizerName(99)); }},
      {"optimizer.lr", [](v1::JobSpec* s) { s->mutable_optimizer()->set_lr(-1); }},
      {"sync.mode", [](v1::JobSpec* s) { s->mutable_sync()->set_mode(v1::SyncMode(7)); }},  // a newer client's
      {"sync.compression",  // int8 with allreduce
       [](v1::JobSpec* s) { s->mutable_sync()->set_compression(v1::COMPRESSION_INT8); }},
      {"sync.fragments", [](v1::JobSpec* s) { s->mutable_sync()->set_fragments(2); }},         // allreduce
      {"sync.overlap", [](v1::JobSpec* s) { s->mutable_sync()->set_overlap(true); }},          // allreduce
      {"sync.overlap_steps", [](v1::JobSpec* s) { s->mutable_sync()->set_overlap_steps(2); }},  // allreduce
      {"sync.overlap_steps",
       [](v1::JobSpec* s) {
         s->mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
         s->mutable_sync()->set_every(8);
         s->mutable_sync()->set_overlap_steps(-1);
       }},
      {"sync.overlap_steps",
       [](v1::JobSpec* s) {  // merged after the fragment's next round would launch
         s->mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
         s->mutable_sync()->set_every(4);
         s->mutable_sync()->set_overlap_steps(5);
       }},
      {"sync.overlap",
       [](v1::JobSpec* s) {  // overlap is overlap_steps: 1; both, disagreeing
         s->mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
         s->mutable_sync()->set_every(8);
         s->mutable_sync()->set_overlap(true);
         s->mutable_sync()->set_overlap_steps(3);
       }},
      {"sync.shard_optimizer",
       [](v1::JobSpec* s) {
         s->mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
         s->mutable_sync()->set_every(4);
         s->mutable_sync()->set_shard_optimizer(true);
       }},
      {"sync.fragments",
       [](v1::JobSpec* s) {
         s->mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
         s->mutable_sync()->set_every(4);
         s->mutable_sync()->set_fragments(5);
       }},
      {"device", [](v1::JobSpec* s) { s->set_device(v1::Device(3)); }},
      {"bf16_autocast", [](v1::JobSpec* s) { s->set_bf16_autocast(true); }},  // a cpu job
      {"schedule.step_size", [](v1::JobSpec* s) { s->mutable_schedule()->set_name(v1::SCHEDULE_NAME_STEP); }},
      {"schedule.d_model", [](v1::JobSpec* s) {
         s->mutable_schedule()->set_name(v1::SCHEDULE_NAME_NOAM);
         s->mutable_schedule()->set_warmup_steps(100);
       }},
      {"schedule.warmup_steps", [](v1::JobSpec* s) {
         s->mutable_schedule()->set_name(v1::SCHEDULE_NAME_NOAM);
         s->mutable_schedule()->set_d_model(512);
         s->mutable_schedule()->set_warmup_steps(0);
       }},
      {"schedule.d_model", [](v1::JobSpec* s) { s->mutable_schedule()->set_d_model(512); }},
      {"model.widths", [](v1::JobSpec* s) { s->mutable_model()->add_widths(16); }},  // GoodSpec is a mnist_cnn
      {"model.width", [](v1::JobSpec* s) { s->mutable_model()->set_width(256); }},
      {"model.hidden", [](v1::JobSpec* s) {
         s->mutable_model()->set_name("mlp");
         s->mutable_model()->add_hidden(0);
       }},
      {"model.widths", [](v1::JobSpec* s) {
         s->mutable_model()->set_name("resnet_small");
         s->mutable_model()->add_widths(20);
       }},
      {"model.norm", [](v1::JobSpec* s) { s->mutable_model()->set_norm(v1::NORM_BATCH); }},  // a mnist_cnn
      {"model.norm", [](v1::JobSpec* s) {
         s->mutable_model()->set_name("resnet_small");
         s->mutable_model()->set_norm(v1::Norm(9));
       }},
      {"epochs", [](v1::JobSpec* s) { s->set_epochs(-1); }},
      {"collective_timeout_seconds", [](v1::JobSpec* s) { s->set_collective_timeout_seconds(0.1); }},
      {"collective_timeout_seconds", [](v1::JobSpec* s) { s->set_collective_timeout_seconds(7200); }},
      {"priority", [](v1::JobSpec* s) { s->set_priority(1001); }},
      {"priority", [](v1::JobSpec* s) { s->set_priority(-1001); }},
      {"global_batch_size", [](v1::JobSpec* s) { s->set_global_batch_size(-64); }},
      {"global_batch_size", [](v1::JobSpec* s) {  // below min_workers
         s->set_min_workers(3);
         s->set_max_workers(4);
         s->set_global_batch_size(2);
       }},
      {"global_batch_size", [](v1::JobSpec* s) {  // not divisible into the minimum world
         s->set_min_workers(3);
         s->set_max_workers(4);
         s->set_global_batch_size(100);
       }},
      {"grad_accumulation", [](v1::JobSpec* s) {
         s->set_global_batch_size(128);
         s->set_grad_accumulation(2);
       }},
      {"optimizer.scale_lr", [](v1::JobSpec* s) {
         s->set_global_batch_size(128);
         s->mutable_optimizer()->set_scale_lr(v1::SCALE_LR_LINEAR);
       }},
      {"global_batch_size", [](v1::JobSpec* s) {  // too many micro-batches of batch_size
         s->set_batch_size(1);
         s->set_global_batch_size(int64_t{1} << 20);
       }},
  };
  for (const auto& c : cases) {
    auto spec = GoodSpec();
    c.mutate(&spec);
    auto status = ValidateJobSpec(spec);
    ASSERT_FALSE(status.ok()) << c.field;
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message().rfind(std::string(c.field) + ":", 0), 0u) << status;
  }
}

// Every closed set keeps its YAML names, and a name outside it is refused
// while the file is read, naming the field and listing the choices.
TEST(JobSpecYaml, UnknownChoiceNamesTheFieldAndTheChoices) {
  const struct {
    const char* yaml;
    const char* error;
  } cases[] = {
      {"model: {name: resnet_small, norm: layer}",
       "model.norm: unknown value 'layer' (expected one of: group, batch, sync_batch)"},
      {"dataset: {kind: parquet}",
       "dataset.kind: unknown value 'parquet' (expected one of: idx, text, synthetic, tokens, npy)"},
      {"dataset: parquet",
       "dataset.kind: unknown value 'parquet' (expected one of: idx, text, synthetic, tokens, npy)"},
      {"dataset: {kind: tokens, dtype: int8}", "dataset.dtype: unknown value 'int8' (expected one of: uint16, uint32)"},
      {"optimizer: {name: lbfgs}", "optimizer.name: unknown value 'lbfgs' (expected one of: sgd, adam, adamw)"},
      {"optimizer: lbfgs", "optimizer.name: unknown value 'lbfgs' (expected one of: sgd, adam, adamw)"},
      {"optimizer: {scale_lr: cubic}",
       "optimizer.scale_lr: unknown value 'cubic' (expected one of: none, linear, sqrt)"},
      {"schedule: {name: linear_decay}",
       "schedule.name: unknown value 'linear_decay' (expected one of: constant, cosine, step, noam)"},
      {"sync: {mode: gossip}", "sync.mode: unknown value 'gossip' (expected one of: allreduce, average)"},
      {"sync: gossip", "sync.mode: unknown value 'gossip' (expected one of: allreduce, average)"},
      {"sync: {compression: int4}", "sync.compression: unknown value 'int4' (expected one of: none, fp16, bf16, int8)"},
      {"sync: {same_host_transport: rdma}",
       "sync.same_host_transport: unknown value 'rdma' (expected one of: shm, tcp)"},
      {"sync: {shares: fastest}", "sync.shares: unknown value 'fastest' (expected one of: equal, throughput)"},
      {"sync: {outer: {kind: adam}}", "sync.outer.kind: unknown value 'adam' (expected one of: none, nesterov)"},
      {"sync: {outer: adam}", "sync.outer.kind: unknown value 'adam' (expected one of: none, nesterov)"},
      {"checkpoint: {on_failure: retry}",
       "checkpoint.on_failure: unknown value 'retry' (expected one of: continue, fail)"},
      {"device: tpu", "device: unknown value 'tpu' (expected one of: cpu, cuda)"},
      {"on_nonfinite: ignore", "on_nonfinite: unknown value 'ignore' (expected one of: fail, skip_step)"},
      {"device: CUDA", "device: unknown value 'CUDA' (expected one of: cpu, cuda)"},  // the names are lower case
      {"device: DEVICE_CUDA", "device: unknown value 'DEVICE_CUDA' (expected one of: cpu, cuda)"},
      {"sync: {mode: [average]}", "sync.mode: expected a string"},
  };
  for (const auto& c : cases) {
    auto spec = ParseJobSpecYaml(c.yaml);
    ASSERT_FALSE(spec.ok()) << c.yaml;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(spec.status().message(), c.error);
  }
}

// Every YAML name of every closed set reads into its enum value.
TEST(JobSpecYaml, EveryChoiceReadsAsItsEnumValue) {
  auto spec = ParseJobSpecYaml(R"(
model: {name: resnet_small, norm: sync_batch}
dataset: {kind: tokens, dtype: uint32}
optimizer: {name: adamw, scale_lr: sqrt}
schedule: noam
sync: {mode: average, compression: int8, same_host_transport: tcp, shares: throughput, outer: nesterov}
checkpoint: {on_failure: fail}
device: cuda
on_nonfinite: skip_step
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().norm(), v1::NORM_SYNC_BATCH);
  EXPECT_EQ(spec->dataset().kind(), v1::DATASET_KIND_TOKENS);
  EXPECT_EQ(spec->dataset().dtype(), v1::TOKEN_DTYPE_UINT32);
  EXPECT_EQ(spec->optimizer().name(), v1::OPTIMIZER_NAME_ADAMW);
  EXPECT_EQ(spec->optimizer().scale_lr(), v1::SCALE_LR_SQRT);
  EXPECT_EQ(spec->schedule().name(), v1::SCHEDULE_NAME_NOAM);
  EXPECT_EQ(spec->sync().mode(), v1::SYNC_MODE_AVERAGE);
  EXPECT_EQ(spec->sync().compression(), v1::COMPRESSION_INT8);
  EXPECT_EQ(spec->sync().same_host_transport(), v1::SAME_HOST_TRANSPORT_TCP);
  EXPECT_EQ(spec->sync().shares(), v1::SHARES_THROUGHPUT);
  EXPECT_EQ(spec->sync().outer().kind(), v1::OUTER_KIND_NESTEROV);
  EXPECT_EQ(spec->checkpoint().on_failure(), v1::ON_FAILURE_FAIL);
  EXPECT_EQ(spec->device(), v1::DEVICE_CUDA);
  EXPECT_EQ(spec->on_nonfinite(), v1::ON_NONFINITE_SKIP_STEP);
  EXPECT_EQ(SpecName(spec->sync().same_host_transport()), "tcp");
  EXPECT_EQ(SpecName(spec->on_nonfinite()), "skip_step");
}

// An empty string is unset, as when these fields were strings: the default
// applies, or a required field is named as such.
TEST(JobSpecYaml, EmptyChoiceIsUnset) {
  auto spec = ParseJobSpecYaml("device: ''\nsync: {mode: ''}\ndataset: {kind: ''}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device(), v1::DEVICE_UNSPECIFIED);
  ApplyJobDefaults(&*spec);
  EXPECT_EQ(spec->device(), v1::DEVICE_CPU);
  EXPECT_EQ(spec->sync().mode(), v1::SYNC_MODE_ALLREDUCE);
  EXPECT_EQ(Verdict("model: mlp\nbatch_size: 8\ndataset: {kind: ''}\n"), "dataset.kind: required");
}

// A number no enum value has (a newer client's) is named in the error.
TEST(JobSpecValidate, UndefinedEnumNumberNamesTheChoices) {
  auto spec = GoodSpec();
  spec.mutable_sync()->set_compression(v1::Compression(42));
  EXPECT_EQ(ValidateJobSpec(spec).message(),
            "sync.compression: unknown value '42' (expected one of: none, fp16, bf16, int8)");
}

}  // namespace
}  // namespace herd
