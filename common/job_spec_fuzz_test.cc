// Fuzzes the job-spec YAML parser and validation with a seeded mutation
// loop over a corpus of valid specs: a fixed number of iterations, the same
// inputs on every run. Every input must be accepted or rejected with an
// error naming the field (job_spec_fuzz.h); a crash fails the test too.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/control_chars.h"
#include "common/job_spec.h"
#include "common/job_spec_fuzz.h"
#include "common/job_spec_yaml.h"
#include "proto/herd.pb.h"

namespace herd {
namespace {

constexpr int kIterations = 20000;
constexpr uint32_t kSeed = 16;

// Valid specs that together touch every field.
const char* const kSeeds[] = {
    "name: fashion-mnist-cnn\nmodel: mnist_cnn\ndataset: {kind: idx, path: /data/fashion-mnist}\n"
    "batch_size: 64\nepochs: 1\noptimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
    "schedule: {name: cosine, warmup_steps: 20}\nsync: {mode: allreduce}\nmin_workers: 2\nmax_workers: 2\n",
    "name: avg\nmodel: {name: mlp}\ndataset:\n  kind: synthetic\n  synthetic_samples: 512\n"
    "  synthetic_features: 32\n  synthetic_classes: 4\nbatch_size: 16\nmax_steps: 100\n"
    "sync:\n  mode: average\n  every: 4\n  warmup_steps: 2\n  outer: {kind: nesterov, lr: 0.7, momentum: 0.9}\n"
    "  compression: bf16\n  first_bucket_mib: 1\n  bucket_cap_mib: 25\n  same_host_transport: tcp\n"
    "optimizer: {name: adamw, lr: 0.001, weight_decay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8}\n"
    "schedule: {name: step, step_size: 10, gamma: 0.5, min_lr: 0}\n",
    "model: {name: torchscript, path: models/net.pt}\ndataset: {kind: text, path: corpus.txt, sequence_length: 64}\n"
    "batch_size: 8\nepochs: 2\ngrad_clip_norm: 1.0\ngrad_accumulation: 2\ndevice: cpu\nseed: 7\n"
    "checkpoint: {interval_steps: 50, keep: 2, on_failure: fail}\neval: {interval_steps: 25, max_samples: 100}\n"
    "threads: 2\nrestart_budget: 5\nbf16_autocast: false\nlog_interval_steps: 5\ncollective_timeout_seconds: 10\n",
    "model: char_transformer\ndataset: {kind: text, path: t.txt}\nbatch_size: 4\nmax_steps: 3\n",
};

std::vector<std::string> Corpus() {
  std::vector<std::string> corpus(std::begin(kSeeds), std::end(kSeeds));
  for (const char* name : {"examples/fashion-mnist-cnn.yaml", "examples/synthetic-mlp.yaml"}) {
    std::ifstream in(name);
    EXPECT_TRUE(in) << name;
    std::stringstream text;
    text << in.rdbuf();
    corpus.push_back(text.str());
  }
  return corpus;
}

// YAML syntax, odd scalars and every field name: what mutations insert.
std::vector<std::string> Dictionary() {
  std::vector<std::string> words = {
      ":",    ": ",  " ",     "\n",    "\n  ",  "{",     "}",          "[",         "]",     ",",
      "- ",   "'",   "\"",    "#",     "&a ",   "*a",    "!!str ",     "!!binary ", "!!map ", "~",
      "null", "true", "-1",   "0",     "1e309", ".nan",  "-.inf",      "0x1F",      "1.5",   "9223372036854775808",
      "\t",   "\x1b[2J", "\x07", "\r", "? ",    "|\n  ", ">-\n  ",     "<<: *a",    "%YAML 1.2\n---\n", "...",
      ".inf", "-0.0", "-9223372036854775808", "9223372036854775807",
      "\xc2\x9b", "\xff", std::string(1, '\0'), "{a: [b, {c: d}]}", "[[[[[[[[",     "}}}}",
  };
  std::vector<const google::protobuf::Descriptor*> pending = {v1::JobSpec::descriptor()};
  while (!pending.empty()) {
    const google::protobuf::Descriptor* descriptor = pending.back();
    pending.pop_back();
    for (int i = 0; i < descriptor->field_count(); ++i) {
      words.push_back(descriptor->field(i)->name() + ": ");
      if (descriptor->field(i)->message_type() != nullptr) pending.push_back(descriptor->field(i)->message_type());
    }
  }
  return words;
}

class Mutator {
 public:
  Mutator(std::vector<std::string> corpus, std::vector<std::string> dictionary)
      : corpus_(std::move(corpus)), dictionary_(std::move(dictionary)), random_(kSeed) {}

  std::string Next() {
    std::string text = Pick(corpus_);
    const int mutations = 1 + Below(4);
    for (int i = 0; i < mutations; ++i) Mutate(&text);
    return text;
  }

 private:
  size_t Below(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(random_); }
  const std::string& Pick(const std::vector<std::string>& from) { return from[Below(from.size())]; }

  void Mutate(std::string* text) {
    const size_t at = Below(text->size() + 1);
    switch (Below(6)) {
      case 0:  // flip a byte
        if (!text->empty()) (*text)[Below(text->size())] = static_cast<char>(Below(256));
        break;
      case 1:  // insert a dictionary word
        text->insert(at, Pick(dictionary_));
        break;
      case 2:  // delete a span
        text->erase(at, Below(16));
        break;
      case 3: {  // duplicate a line, or splice one from another spec
        std::vector<std::string> lines = absl::StrSplit(*text, '\n');
        std::vector<std::string> other = absl::StrSplit(Pick(corpus_), '\n');
        lines.insert(lines.begin() + Below(lines.size() + 1), Below(2) ? Pick(lines) : Pick(other));
        *text = absl::StrJoin(lines, "\n");
        break;
      }
      case 4:  // re-indent a line
        text->insert(text->rfind('\n', at) == std::string::npos ? 0 : text->rfind('\n', at) + 1,
                     std::string(Below(5), ' '));
        break;
      default:  // replace a value with a dictionary word
        if (size_t colon = text->find(": ", at); colon != std::string::npos) {
          const size_t end = text->find('\n', colon);
          text->replace(colon + 2, end == std::string::npos ? std::string::npos : end - colon - 2, Pick(dictionary_));
        }
        break;
    }
  }

  const std::vector<std::string> corpus_;
  const std::vector<std::string> dictionary_;
  std::mt19937 random_;
};

TEST(JobSpecFuzz, TheSeedsAreValid) {
  for (const std::string& spec : Corpus()) {
    bool accepted = false;
    absl::Status status = FuzzJobSpecOnce(spec, &accepted);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(accepted) << spec;
  }
}

TEST(JobSpecFuzz, EveryRejectionNamesAField) {
  Mutator mutator(Corpus(), Dictionary());
  int accepted = 0;
  int rejected = 0;
  for (int i = 0; i < kIterations; ++i) {
    const std::string input = mutator.Next();
    bool ok = false;
    absl::Status status = FuzzJobSpecOnce(input, &ok);
    ASSERT_TRUE(status.ok()) << "iteration " << i << ": " << status << "\ninput: " << EscapeControlChars(input);
    (ok ? accepted : rejected)++;
  }
  // Both paths ran: the loop is not stuck on one kind of input.
  EXPECT_GT(accepted, kIterations / 100);
  EXPECT_GT(rejected, kIterations / 10);
}

// Every numeric field of JobSpec, by its YAML path, found through the
// descriptor (as the control-character check walks the string fields), so a
// field added later is covered without touching this test.
struct NumericField {
  std::string path;
  const google::protobuf::FieldDescriptor* field;
};

std::vector<NumericField> NumericFields(const google::protobuf::Descriptor* descriptor, const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  std::vector<NumericField> fields;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const std::string path = prefix.empty() ? field->name() : prefix + "." + field->name();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        std::vector<NumericField> inner = NumericFields(field->message_type(), path);
        fields.insert(fields.end(), inner.begin(), inner.end());
        break;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        fields.push_back({path, field});
        break;
      default:
        break;
    }
  }
  return fields;
}

// A small valid spec (flow-style YAML) with `path` set to the YAML scalar
// `value` (a one-element list for a repeated field).
std::string SpecWith(const std::string& path, const std::string& value, bool repeated) {
  nlohmann::ordered_json tree = {{"model", {{"name", "mlp"}}}, {"dataset", {{"kind", "synthetic"}}},
                                 {"batch_size", "8"}};
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  nlohmann::ordered_json* node = &tree;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!node->contains(parts[i])) (*node)[parts[i]] = nlohmann::ordered_json::object();
    node = &(*node)[parts[i]];
  }
  (*node)[parts.back()] = repeated ? "[" + value + "]" : value;
  std::function<std::string(const nlohmann::ordered_json&)> emit = [&](const nlohmann::ordered_json& j) {
    if (!j.is_object()) return j.get<std::string>();
    std::vector<std::string> entries;
    for (const auto& [key, child] : j.items()) entries.push_back(key + ": " + emit(child));
    return "{" + absl::StrJoin(entries, ", ") + "}";
  };
  return emit(tree);
}

struct Refusal {
  bool refused = false;
  std::string message;
};

Refusal Judge(const std::string& yaml) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  absl::Status status = spec.status();
  if (spec.ok()) {
    ApplyJobDefaults(&*spec);
    status = ValidateJobSpec(*spec);
  }
  return {!status.ok(), std::string(status.message())};
}

TEST(JobSpecFuzz, TheNumericBaseSpecIsValid) {
  Refusal base = Judge(SpecWith("seed", "1", false));
  EXPECT_FALSE(base.refused) << base.message;
}

// NaN, both infinities, negative zero and the int64 extremes in every numeric
// field: NaN and the infinities are refused naming the field and the value
// (NaN passes every `x < 0` check), the int64 extremes are refused naming the
// field (no step count may overflow downstream), and -0 is accepted or refused
// naming the field.
TEST(JobSpecFuzz, EveryNumericFieldRefusesNonFiniteAndExtremeValues) {
  using google::protobuf::FieldDescriptor;
  const std::vector<NumericField> fields = NumericFields(v1::JobSpec::descriptor(), "");
  ASSERT_GT(fields.size(), 30u);  // the walk found the nested messages
  int floats = 0;
  for (const NumericField& numeric : fields) {
    const bool repeated = numeric.field->is_repeated();
    // The path the error names: a repeated field's element as "path" or "path[0]".
    auto names_field = [&](const Refusal& r) {
      return r.message.rfind(numeric.path + ": ", 0) == 0 || r.message.rfind(numeric.path + "[0]: ", 0) == 0;
    };
    auto must_refuse = [&](const std::string& yaml_value, const std::string& shown) {
      Refusal r = Judge(SpecWith(numeric.path, yaml_value, repeated));
      EXPECT_TRUE(r.refused) << numeric.path << " = " << yaml_value << " was accepted";
      EXPECT_TRUE(names_field(r)) << numeric.path << " = " << yaml_value << ": " << r.message;
      EXPECT_NE(r.message.find(shown), std::string::npos) << numeric.path << " = " << yaml_value << ": " << r.message;
    };
    auto accept_or_name = [&](const std::string& yaml_value) {
      Refusal r = Judge(SpecWith(numeric.path, yaml_value, repeated));
      EXPECT_TRUE(!r.refused || names_field(r)) << numeric.path << " = " << yaml_value << ": " << r.message;
    };
    switch (numeric.field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        ++floats;
        must_refuse(".nan", "got nan");
        must_refuse(".inf", "got inf");
        must_refuse("-.inf", "got -inf");
        must_refuse("1e999", "");  // beyond a double: infinity, or not a number
        accept_or_name("-0.0");
        accept_or_name("1.7976931348623157e308");
        accept_or_name("-1.7976931348623157e308");
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        accept_or_name("18446744073709551615");
        must_refuse("-1", "");
        break;
      default:
        must_refuse("9223372036854775807", "9223372036854775807");
        must_refuse("-9223372036854775808", "-9223372036854775808");
        must_refuse("9223372036854775808", "");  // past int64: the parser names it
        accept_or_name("0");
        accept_or_name("-0");
        accept_or_name("-1");
        break;
    }
  }
  EXPECT_GE(floats, 13);
}

// The checker itself: it must refuse what names no field.
TEST(JobSpecFuzz, CheckerRefusesErrorsThatNameNoField) {
  EXPECT_TRUE(CheckNamesAField(absl::InvalidArgumentError("optimizer.lr: must be > 0")).ok());
  EXPECT_TRUE(CheckNamesAField(absl::InvalidArgumentError("sync.outer.kind: unknown value 'x'")).ok());
  EXPECT_TRUE(CheckNamesAField(absl::InvalidArgumentError("optimizer.lrr: unknown field (known: ...)")).ok());
  EXPECT_TRUE(CheckNamesAField(absl::InvalidArgumentError("job spec: not valid YAML: ...")).ok());
  EXPECT_FALSE(CheckNamesAField(absl::InvalidArgumentError("something went wrong")).ok());
  EXPECT_FALSE(CheckNamesAField(absl::InvalidArgumentError("optimizer.lrr: must be > 0")).ok());
  EXPECT_FALSE(CheckNamesAField(absl::InvalidArgumentError("batch_size.x: must be > 0")).ok());
  EXPECT_FALSE(CheckNamesAField(absl::InternalError("name: boom")).ok());
}

}  // namespace
}  // namespace herd
