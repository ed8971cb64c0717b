#include "client/format.h"

#include <nlohmann/json.hpp>

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/table.h"
#include "common/control_chars.h"
#include "common/labels.h"
#include "common/spec_enums.h"

namespace herd::client {

std::string JobStateName(v1::JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return "UNKNOWN";
  return v1::JobState_Name(state);
}

std::string WorkerStateName(v1::WorkerState state) {
  if (state == v1::WORKER_STATE_UNSPECIFIED) return "UNKNOWN";
  return v1::WorkerState_Name(state);
}

bool IsFinalState(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::string FormatDuration(double seconds) {
  int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string FormatAge(double seconds) {
  int64_t s = static_cast<int64_t>(std::max(0.0, seconds));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrCat(s / 60, "m");
  if (s < 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, units[unit]);
}

std::string FormatEval(const google::protobuf::Map<std::string, double>& eval) {
  std::map<std::string, double> sorted(eval.begin(), eval.end());
  std::vector<std::string> parts;
  for (const auto& [name, value] : sorted) parts.push_back(absl::StrFormat("%s %.4g", name, value));
  return absl::StrJoin(parts, " ");
}

std::string FormatLoss(double loss) { return absl::StrFormat("%.4f", loss); }

std::string FormatStep(const v1::JobInfo& job) {
  if (job.total_steps() > 0) return absl::StrCat(job.step(), "/", job.total_steps());
  return absl::StrCat(job.step());
}

namespace {

// Proto3's JSON mapping quotes 64-bit integers ("step": "420"). Counters in
// herd stay far below 2^53, so print them as plain numbers: what jq users and
// scripts expect from `-o json`. It names enum values by their constants; the
// spec's closed sets print as in the job file instead ("mode": "average",
// "" when unset), as they did when they were strings.
void PlainJsonValues(const google::protobuf::Descriptor* descriptor, nlohmann::json& json) {
  using google::protobuf::FieldDescriptor;
  if (!json.is_object()) return;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    auto it = json.find(field->name());
    if (it == json.end()) continue;
    const FieldDescriptor* element = field->is_map() ? field->message_type()->map_value() : field;
    auto convert = [&](nlohmann::json& value) {
      if (element->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        PlainJsonValues(element->message_type(), value);
      } else if (element->cpp_type() == FieldDescriptor::CPPTYPE_ENUM && IsSpecEnum(element->enum_type())) {
        const google::protobuf::EnumValueDescriptor* named =
            value.is_string() ? element->enum_type()->FindValueByName(value.get<std::string>()) : nullptr;
        const int number = named != nullptr ? named->number() : value.is_number() ? value.get<int>() : 0;
        value = SpecEnumName(element->enum_type(), number);
      } else if (value.is_string() && (element->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
                                       element->cpp_type() == FieldDescriptor::CPPTYPE_UINT64)) {
        const std::string text = value.get<std::string>();
        if (element->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
          value = std::stoll(text);
        } else {
          value = std::stoull(text);
        }
      }
    };
    if (field->is_map()) {
      for (auto& entry : it->items()) convert(entry.value());
    } else if (field->is_repeated()) {
      for (auto& entry : *it) convert(entry);
    } else {
      convert(*it);
    }
  }
}

}  // namespace

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::InternalError(absl::StrCat("cannot print JSON: ", status.ToString()));
  nlohmann::json parsed = nlohmann::json::parse(json);
  PlainJsonValues(message.GetDescriptor(), parsed);
  return parsed.dump();
}

std::string JobsTable(const std::vector<v1::JobInfo>& jobs, double now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::JobInfo& job : jobs) {
    bool started = job.step() > 0;
    rows.push_back({
        job.id(),
        job.name(),
        job.owner().empty() ? "-" : job.owner(),
        JobStateName(job.state()),
        absl::StrCat(job.spec().priority()),
        FormatStep(job),
        absl::StrCat(job.epoch()),
        absl::StrCat(job.world_size()),
        absl::StrCat(job.generation()),
        started ? absl::StrFormat("%.0f", job.samples_per_second()) : "-",
        started ? FormatLoss(job.loss()) : "-",
        job.created_unix() > 0 ? FormatAge(now - job.created_unix()) : "-",
    });
  }
  return FormatTable({"ID", "NAME", "OWNER", "STATE", "PRIO", "STEP", "EPOCH", "WORLD", "GEN", "SAMPLES/S", "LOSS", "AGE"}, rows);
}

std::string WorkerStateLabel(const v1::WorkerInfo& worker) {
  std::string label = WorkerStateName(worker.state());
  if (worker.cordoned()) absl::StrAppend(&label, ",CORDONED");
  if (worker.draining()) absl::StrAppend(&label, ",DRAINING");
  return label;
}

std::string WorkersTable(const std::vector<v1::WorkerInfo>& workers, double now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::WorkerInfo& worker : workers) {
    rows.push_back({
        worker.id(),
        worker.address(),
        absl::StrCat(worker.device_kind(), " x", worker.device_count()),
        WorkerStateLabel(worker),
        worker.job_id().empty() ? "-" : worker.job_id(),
        worker.last_heartbeat_unix() > 0 ? FormatAge(now - worker.last_heartbeat_unix()) + " ago" : "never",
        worker.labels().empty() ? "-" : FormatLabels(Labels(worker.labels().begin(), worker.labels().end())),
    });
  }
  return FormatTable({"ID", "ADDRESS", "DEVICE", "STATE", "JOB", "HEARTBEAT", "LABELS"}, rows);
}

std::string CheckpointsTable(const std::vector<v1::CheckpointInfo>& checkpoints, double now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::CheckpointInfo& checkpoint : checkpoints) {
    rows.push_back({
        checkpoint.id(),
        absl::StrCat(checkpoint.step()),
        absl::StrCat(checkpoint.epoch()),
        absl::StrCat(checkpoint.generation()),
        FormatBytes(checkpoint.size_bytes()),
        checkpoint.sha256().substr(0, 12),
        checkpoint.created_unix() > 0 ? FormatAge(now - checkpoint.created_unix()) : "-",
        checkpoint.path(),
    });
  }
  return FormatTable({"ID", "STEP", "EPOCH", "GEN", "SIZE", "SHA256", "AGE", "PATH"}, rows);
}

namespace {

std::string FormatTime(double unix_seconds, double now) {
  if (unix_seconds <= 0) return "-";
  absl::Time time = absl::FromUnixMicros(static_cast<int64_t>(unix_seconds * 1e6));
  return absl::StrCat(absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", time, absl::UTCTimeZone()), " (",
                      FormatDuration(now - unix_seconds), " ago)");
}

}  // namespace

std::string FormatStepTime(double seconds) {
  const double ms = seconds * 1000;
  if (ms < 10) return absl::StrFormat("%.1f ms", ms);
  if (ms < 10000) return absl::StrFormat("%.0f ms", ms);
  return absl::StrFormat("%.1f s", seconds);
}

namespace {

bool ShowsStraggler(const v1::JobInfo& job) {
  return job.state() == v1::RUNNING && job.has_straggler() && job.world_size() >= 2 &&
         job.straggler().step_seconds() > 0;
}

std::string StragglerName(const v1::Straggler& straggler) {
  std::string name = absl::StrCat(straggler.rank());
  if (!straggler.worker_id().empty()) absl::StrAppend(&name, " (", straggler.worker_id(), ")");
  return name;
}

}  // namespace

std::string FormatStraggler(const v1::JobInfo& job) {
  if (!ShowsStraggler(job)) return "";
  const v1::Straggler& s = job.straggler();
  return absl::StrCat(StragglerName(s), " ", FormatStepTime(s.compute_seconds_per_step()), "/step compute vs ",
                      FormatStepTime(s.median_compute_seconds_per_step()), " median; the others wait ",
                      FormatStepTime(s.others_wait_seconds_per_step()), "/step",
                      absl::StrFormat(" (%.0f%% of a step)", 100 * s.holdback_fraction()));
}

std::string FormatStragglerShort(const v1::JobInfo& job) {
  if (!ShowsStraggler(job)) return "";
  const v1::Straggler& s = job.straggler();
  return absl::StrCat("slowest rank ", StragglerName(s), " +", FormatStepTime(s.others_wait_seconds_per_step()),
                      "/step", absl::StrFormat(" (%.0f%%)", 100 * s.holdback_fraction()));
}

std::string FormatOverlap(const v1::JobInfo& job) {
  if (!job.has_sync_state() || job.sync_state().overlap_steps() <= 0) return "";
  const v1::SyncState& sync = job.sync_state();
  std::string text = absl::StrCat("rounds merge ", sync.overlap_steps(), " local step(s) after launch");
  if (sync.overlap_auto()) {
    absl::StrAppend(&text, " (overlap_steps auto");
    if (sync.step_seconds() > 0) {
      absl::StrAppend(&text, ": a round takes ", FormatStepTime(sync.round_seconds()), " in flight, a step ",
                      FormatStepTime(sync.step_seconds()));
    }
    absl::StrAppend(&text, ")");
  }
  return text;
}

std::string FormatRoundShape(const v1::JobInfo& job) {
  const std::string& shape = job.sync_state().round_shape();
  if (shape.empty()) return "";
  if (shape == "gather") return "int8, gather (one hop: each rank all-gathers its own codes)";
  if (shape == "all-reduce") return "int8, all-reduce (scales, reduce-scatter, all-gather)";
  return absl::StrCat("int8, ", shape);
}

std::string JobDetail(const v1::JobInfo& job, double now) {
  std::vector<std::pair<std::string, std::string>> lines;
  lines.push_back({"ID", job.id()});
  lines.push_back({"Name", job.name()});
  lines.push_back({"Owner", job.owner().empty() ? "-" : job.owner()});
  lines.push_back({"State", JobStateName(job.state())});
  if (!job.reason().empty()) lines.push_back({"Reason", job.reason()});
  if (!job.warning().empty()) lines.push_back({"Warning", job.warning()});
  for (const v1::UnresponsiveMember& member : job.unresponsive()) {
    const std::string who = absl::StrCat("worker ", member.worker_id(), " (rank ", member.rank(), " of generation ",
                                         member.generation(), ")");
    std::string text = member.unreachable_from().empty()
                           ? absl::StrCat(who, " did not answer at step ", member.step())
                           : absl::StrCat(who, " was not reachable from island ", member.unreachable_from(),
                                          " at step ", member.step(), "; its island is left out");
    // The back-off doubles each time it fails again right after coming back.
    const std::string backoff =
        member.backoff_seconds() > 0
            ? absl::StrFormat(" (back-off %.0f s)", member.backoff_seconds())
            : "";
    if (!member.answered()) {
      absl::StrAppend(&text, "; left out until its trainer answers", backoff.empty() ? "" : " and its back-off is over",
                      backoff);
    } else {
      const double left = member.since() + member.backoff_seconds() - now;
      absl::StrAppend(&text, "; its trainer answered, it rejoins",
                      left > 0 ? absl::StrFormat(" in %.0f s", left) : " at the next step boundary", backoff);
    }
    lines.push_back({member.unreachable_from().empty() ? "Hung" : "Unreachable", text});
  }
  if (!job.storage_warning().empty()) lines.push_back({"Storage", job.storage_warning()});
  std::string progress = absl::StrCat("step ", FormatStep(job));
  if (job.total_steps() > 0) {
    absl::StrAppend(&progress, absl::StrFormat(" (%.0f%%)", 100.0 * job.step() / job.total_steps()));
  }
  absl::StrAppend(&progress, ", epoch ", job.epoch(), ", ", job.samples_in_epoch(), " samples into the epoch");
  lines.push_back({"Progress", progress});
  lines.push_back({"World size", absl::StrCat(job.world_size(), " (generation ", job.generation(), ")")});
  if (job.workers_size() > 0) lines.push_back({"Workers", absl::StrJoin(job.workers(), ", ")});
  lines.push_back({"Samples/s", absl::StrFormat("%.1f", job.samples_per_second())});
  if (std::string straggler = FormatStraggler(job); !straggler.empty()) lines.push_back({"Slowest rank", straggler});
  lines.push_back({"Loss", job.step() > 0 ? FormatLoss(job.loss()) : "-"});
  std::string lr = job.learning_rate() > 0 ? absl::StrFormat("%.6g", job.learning_rate()) : "-";
  const v1::ScaleLr scale_lr = job.spec().optimizer().scale_lr();
  if (job.learning_rate() > 0 && job.has_spec() && scale_lr != v1::SCALE_LR_NONE &&
      scale_lr != v1::SCALE_LR_UNSPECIFIED) {
    absl::StrAppend(&lr, absl::StrFormat(" (optimizer.lr %g scaled %s at world size %d)", job.spec().optimizer().lr(),
                                         SpecName(scale_lr), job.world_size()));
  }
  lines.push_back({"Learning rate", lr});
  if (std::string overlap = FormatOverlap(job); !overlap.empty()) lines.push_back({"Overlap", overlap});
  if (std::string shape = FormatRoundShape(job); !shape.empty()) lines.push_back({"Rounds", shape});
  lines.push_back({"Eval", job.eval().empty() ? "-" : FormatEval(job.eval())});
  if (job.has_spec()) {
    const v1::JobSpec& spec = job.spec();
    std::string model = spec.model().name();
    if (!spec.model().path().empty()) absl::StrAppend(&model, " ", spec.model().path());
    lines.push_back({"Model", model});
    lines.push_back({"Dataset", absl::StrCat(SpecName(spec.dataset().kind()),
                                             spec.dataset().path().empty() ? "" : " " + spec.dataset().path())});
    if (spec.global_batch_size() > 0) {
      lines.push_back({"Batch size", absl::StrCat(spec.global_batch_size(), " global (micro-batches of at most ",
                                                  spec.batch_size(), " per worker)")});
    } else {
      lines.push_back({"Batch size", absl::StrCat(spec.batch_size(), " per worker")});
    }
    if (spec.sync().shares() == v1::SHARES_THROUGHPUT) {
      lines.push_back({"Batch shares", "throughput (follow each worker's rate)"});
    }
    lines.push_back({"Workers wanted", absl::StrCat(spec.min_workers(), "..", spec.max_workers())});
    if (!spec.placement().require().empty()) {
      lines.push_back({"Placement", absl::StrCat("workers labelled ", FormatLabels(Labels(spec.placement().require().begin(),
                                                                                           spec.placement().require().end())))});
    }
    if (!spec.sync().islands_by().empty()) {
      const int64_t minimum = spec.sync().min_workers_per_island();
      lines.push_back({"Islands", absl::StrCat("by worker label ", spec.sync().islands_by(),
                                               minimum > 1 ? absl::StrCat(", each of at least ", minimum, " workers")
                                                           : std::string())});
    }
    lines.push_back({"Priority", absl::StrCat(spec.priority(), spec.preemptible() ? " (preemptible)" : "")});
  }
  // What `herd fetch` downloads, once the job succeeded.
  for (const v1::ModelFile& file : job.final_model()) {
    lines.push_back({"Trained model", absl::StrCat(file.name(), " ", FormatBytes(file.size_bytes()), " sha256 ",
                                                   file.sha256().substr(0, 12), "... (herd fetch ", job.id(),
                                                   file.name() == "model-final.pt" ? " --format pt)" : ")")});
  }
  lines.push_back({"Created", FormatTime(job.created_unix(), now)});
  lines.push_back({"Updated", FormatTime(job.updated_unix(), now)});

  size_t width = 0;
  for (const auto& [label, value] : lines) width = std::max(width, label.size());
  std::string text;
  for (const auto& [label, value] : lines) {
    // Values hold names, reasons, paths and eval keys from users and workers.
    absl::StrAppend(&text, label, ":", std::string(width - label.size() + 2, ' '), EscapeControlChars(value), "\n");
  }
  if (std::string ranks = RanksTable(job); !ranks.empty()) {
    absl::StrAppend(&text, "\nRanks, per step over the log interval before step ", job.straggler().step(),
                    " (SHARE: samples of each step, now):\n", ranks);
  }
  return text;
}

std::string RanksTable(const v1::JobInfo& job) {
  if (!ShowsStraggler(job) || job.ranks_size() != job.world_size()) return "";
  std::vector<std::vector<std::string>> rows;
  for (int rank = 0; rank < job.ranks_size(); ++rank) {
    const v1::RankInterval& r = job.ranks(rank);
    std::string share = absl::StrCat(r.batch_share());
    if (r.batch_share() != r.samples_per_step()) absl::StrAppend(&share, " (was ", r.samples_per_step(), ")");
    rows.push_back({absl::StrCat(rank), r.worker_id(), FormatStepTime(r.compute_seconds_per_step()),
                    FormatStepTime(r.wait_seconds_per_step()), share,
                    rank == job.straggler().rank() ? "slowest" : ""});
  }
  return FormatTable({"RANK", "WORKER", "COMPUTE", "WAIT", "SHARE", ""}, rows);
}

}  // namespace herd::client
