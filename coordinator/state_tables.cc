#include "coordinator/state_tables.h"

#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/stored_spec.h"

namespace herd::coordinator {
namespace {

using JobColumn = sql::Column<JobRecord>;
using WorkerColumn = sql::Column<WorkerRecord>;
using CheckpointColumn = sql::Column<StoredCheckpoint>;

// Worker ids are restricted to [A-Za-z0-9._-], so a comma is a safe separator.
std::string JoinIds(const std::vector<std::string>& ids) { return absl::StrJoin(ids, ","); }
std::vector<std::string> SplitIds(const std::string& text) { return absl::StrSplit(text, ',', absl::SkipEmpty()); }

// JSON has no NaN or infinity (nlohmann writes them as null): those are
// written as the strings "NaN", "Infinity" and "-Infinity", as proto3's JSON
// mapping does.
std::string EvalToJson(const google::protobuf::Map<std::string, double>& eval) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [name, value] : eval) {
    if (std::isfinite(value)) {
      json[name] = value;
    } else {
      json[name] = std::isnan(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
    }
  }
  return json.dump();
}

void EvalFromJson(const std::string& text, google::protobuf::Map<std::string, double>* eval) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return;
  for (const auto& [name, value] : json.items()) {
    if (value.is_number()) {
      (*eval)[name] = value.get<double>();
    } else if (value == "NaN") {
      (*eval)[name] = std::numeric_limits<double>::quiet_NaN();
    } else if (value == "Infinity" || value == "-Infinity") {
      (*eval)[name] = (value == "Infinity" ? 1 : -1) * std::numeric_limits<double>::infinity();
    }
  }
}

// The final model's files: [{"name", "size_bytes", "sha256"}, ...].
std::string ModelFilesToJson(const google::protobuf::RepeatedPtrField<v1::ModelFile>& files) {
  nlohmann::json json = nlohmann::json::array();
  for (const v1::ModelFile& file : files) {
    json.push_back({{"name", file.name()}, {"size_bytes", file.size_bytes()}, {"sha256", file.sha256()}});
  }
  return json.dump();
}

absl::Status ModelFilesFromJson(const std::string& text, google::protobuf::RepeatedPtrField<v1::ModelFile>* files) {
  files->Clear();
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_array()) return absl::DataLossError(absl::StrCat("final_model is not a JSON array: ", text));
  for (const auto& entry : json) {
    if (!entry.is_object() || !entry.value("name", nlohmann::json()).is_string() ||
        !entry.value("size_bytes", nlohmann::json()).is_number_integer() ||
        !entry.value("sha256", nlohmann::json()).is_string()) {
      return absl::DataLossError(absl::StrCat("final_model entry is not {name, size_bytes, sha256}: ", entry.dump()));
    }
    v1::ModelFile* file = files->Add();
    file->set_name(entry["name"].get<std::string>());
    file->set_size_bytes(entry["size_bytes"].get<int64_t>());
    file->set_sha256(entry["sha256"].get<std::string>());
  }
  return absl::OkStatus();
}

// A worker's labels as a JSON object of strings.
std::string LabelsToJson(const std::map<std::string, std::string>& labels) { return nlohmann::json(labels).dump(); }

absl::Status LabelsFromJson(const std::string& text, std::map<std::string, std::string>* labels) {
  labels->clear();
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return absl::DataLossError(absl::StrCat("labels are not a JSON object: ", text));
  for (const auto& [key, value] : json.items()) {
    if (!value.is_string()) return absl::DataLossError(absl::StrCat("label ", key, " is not a string: ", value.dump()));
    (*labels)[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

// Worker id -> ReleaseReasonName.
std::string ServedToJson(const std::map<std::string, int64_t>& served) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [worker, generation] : served) json[worker] = generation;
  return json.dump();
}

void ServedFromJson(const std::string& text, std::map<std::string, int64_t>* served) {
  served->clear();
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return;
  for (const auto& [worker, generation] : json.items()) {
    if (generation.is_number_integer()) (*served)[worker] = generation.get<int64_t>();
  }
}

std::string ReleasesToJson(const std::map<std::string, ReleaseReason>& releases) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [worker, reason] : releases) json[worker] = std::string(ReleaseReasonName(reason));
  return json.dump();
}

absl::Status ReleasesFromJson(const std::string& text, std::map<std::string, ReleaseReason>* releases) {
  releases->clear();
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return absl::OkStatus();
  for (const auto& [worker, name] : json.items()) {
    if (!name.is_string()) continue;
    std::optional<ReleaseReason> reason = ReleaseReasonFromName(name.get<std::string>());
    if (!reason.has_value()) {
      return absl::DataLossError(
          absl::StrCat("unknown release reason \"", name.get<std::string>(), "\" for worker ", worker));
    }
    (*releases)[worker] = *reason;
  }
  return absl::OkStatus();
}

// The members left out of a job until their trainer answers, and the
// back-off records of those blamed late (JobRecord::unresponsive, readmit):
// {"unresponsive": [UnresponsiveMember as proto JSON], "readmit": {id:
// {"strikes": n, "readmitted_in": g}}}. A restarted or new leader then keeps
// a hung member out instead of re-forming the job into its hang again.
std::string LeftOutToJson(const JobRecord& job) {
  nlohmann::json json = {{"unresponsive", nlohmann::json::array()}, {"readmit", nlohmann::json::object()}};
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  for (const auto& [id, member] : job.unresponsive) {
    std::string text;
    if (google::protobuf::util::MessageToJsonString(member, &text, options).ok()) {
      json["unresponsive"].push_back(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false));
    }
  }
  for (const auto& [id, record] : job.readmit) {
    json["readmit"][id] = {{"strikes", record.strikes}, {"readmitted_in", record.readmitted_in}};
  }
  return json.dump();
}

absl::Status LeftOutFromJson(const std::string& text, JobRecord* job) {
  job->unresponsive.clear();
  job->readmit.clear();
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return absl::DataLossError(absl::StrCat("job ", job->info.id(), ": stored left_out is not JSON"));
  for (const auto& entry : json.value("unresponsive", nlohmann::json::array())) {
    v1::UnresponsiveMember member;
    if (!google::protobuf::util::JsonStringToMessage(entry.dump(), &member).ok() || member.worker_id().empty()) {
      return absl::DataLossError(absl::StrCat("job ", job->info.id(), ": stored unresponsive member ", entry.dump(),
                                              " does not parse"));
    }
    job->unresponsive[member.worker_id()] = member;
  }
  const nlohmann::json readmit = json.value("readmit", nlohmann::json::object());
  for (const auto& [id, record] : readmit.items()) {
    if (!record.is_object() || !record.value("strikes", nlohmann::json()).is_number_integer() ||
        !record.value("readmitted_in", nlohmann::json()).is_number_integer()) {
      return absl::DataLossError(
          absl::StrCat("job ", job->info.id(), ": stored back-off of worker ", id, " does not parse"));
    }
    job->readmit[id] = ReadmitRecord{record["strikes"].get<int>(), record["readmitted_in"].get<int64_t>()};
  }
  job->info.clear_unresponsive();
  for (const auto& [id, member] : job->unresponsive) *job->info.add_unresponsive() = member;
  return absl::OkStatus();
}

// Rows written before pending_reason existed: a PENDING job's reason text
// says why it waits. Read once, when the column is added; from then on the
// text is only derived from the stored PendingReason.
std::string PendingReasonBackfill() {
  return absl::StrCat(
      "UPDATE jobs SET pending_reason = CASE"
      " WHEN reason LIKE 'waiting for workers released by lower-priority jobs%' THEN '",
      PendingReasonName(PendingReason::kWaitingForReleasedWorkers), "'",
      " WHEN reason LIKE 'suspended at step %' THEN '", PendingReasonName(PendingReason::kSuspended), "'",
      " WHEN reason LIKE 'every member was released at step %' THEN '", PendingReasonName(PendingReason::kAllReleased),
      "'", " ELSE '", PendingReasonName(PendingReason::kWaitingForWorkers),
      "' END WHERE state = ", static_cast<int>(v1::PENDING));
}

// Column order is the order of a database upgraded through every version
// (the first schema, then each added column); a fresh one is created so.
// The defaults of added columns describe rows written before they existed.
std::vector<JobColumn> JobColumns() {
  return {
      JobColumn::Text(
          "id", "PRIMARY KEY", [](const JobRecord& j) { return j.info.id(); },
          [](JobRecord& j, const std::string& v) { j.info.set_id(v); }),
      JobColumn::Integer(
          "submit_seq", "NOT NULL", [](const JobRecord& j) { return j.submit_seq; },
          [](JobRecord& j, int64_t v) { j.submit_seq = v; }),
      JobColumn::Blob(
          "spec", "NOT NULL", [](const JobRecord& j) { return j.info.spec().SerializeAsString(); },
          [](JobRecord& j, const std::string& v) -> absl::Status {
            if (!j.info.mutable_spec()->ParseFromString(v)) {
              return absl::DataLossError(absl::StrCat("job ", j.info.id(), ": stored spec does not parse"));
            }
            if (auto s = UpgradeStoredSpec(j.info.mutable_spec()); !s.ok()) {
              return absl::DataLossError(absl::StrCat("job ", j.info.id(), ": stored spec: ", s.message()));
            }
            j.info.set_name(j.info.spec().name());
            return absl::OkStatus();
          }),
      JobColumn::Integer(
          "state", "NOT NULL", [](const JobRecord& j) { return j.info.state(); },
          [](JobRecord& j, int64_t v) { j.info.set_state(static_cast<v1::JobState>(v)); }),
      JobColumn::Text(
          "reason", "NOT NULL", [](const JobRecord& j) { return j.info.reason(); },
          [](JobRecord& j, const std::string& v) { j.info.set_reason(v); }),
      JobColumn::Integer(
          "step", "NOT NULL", [](const JobRecord& j) { return j.info.step(); },
          [](JobRecord& j, int64_t v) { j.info.set_step(v); }),
      JobColumn::Integer(
          "epoch", "NOT NULL", [](const JobRecord& j) { return j.info.epoch(); },
          [](JobRecord& j, int64_t v) { j.info.set_epoch(v); }),
      JobColumn::Integer(
          "world_size", "NOT NULL", [](const JobRecord& j) { return j.info.world_size(); },
          [](JobRecord& j, int64_t v) { j.info.set_world_size(v); }),
      JobColumn::Integer(
          "samples_in_epoch", "NOT NULL", [](const JobRecord& j) { return j.info.samples_in_epoch(); },
          [](JobRecord& j, int64_t v) { j.info.set_samples_in_epoch(v); }),
      JobColumn::Real(
          "samples_per_second", "NOT NULL", [](const JobRecord& j) { return j.info.samples_per_second(); },
          [](JobRecord& j, double v) { j.info.set_samples_per_second(v); }),
      JobColumn::Real(
          "loss", "NOT NULL", [](const JobRecord& j) { return j.info.loss(); },
          [](JobRecord& j, double v) { j.info.set_loss(v); }),
      JobColumn::Text(
          "eval", "NOT NULL", [](const JobRecord& j) { return EvalToJson(j.info.eval()); },
          [](JobRecord& j, const std::string& v) { EvalFromJson(v, j.info.mutable_eval()); }),
      JobColumn::Integer(
          "total_steps", "NOT NULL", [](const JobRecord& j) { return j.info.total_steps(); },
          [](JobRecord& j, int64_t v) { j.info.set_total_steps(v); }),
      JobColumn::Integer(
          "generation", "NOT NULL", [](const JobRecord& j) { return j.generation.number; },
          [](JobRecord& j, int64_t v) {
            j.generation.number = v;
            j.info.set_generation(v);
          }),
      JobColumn::Integer(
          "next_generation", "NOT NULL", [](const JobRecord& j) { return j.next_generation; },
          [](JobRecord& j, int64_t v) { j.next_generation = v; }),
      JobColumn::Text(
          "members", "NOT NULL", [](const JobRecord& j) { return JoinIds(j.generation.members); },
          [](JobRecord& j, const std::string& v) {
            j.generation.members = SplitIds(v);
            for (const auto& member : j.generation.members) j.info.add_workers(member);
          }),
      JobColumn::Text(
          "finished", "NOT NULL",
          [](const JobRecord& j) {
            return JoinIds(std::vector<std::string>(j.generation.finished.begin(), j.generation.finished.end()));
          },
          [](JobRecord& j, const std::string& v) {
            for (const auto& member : SplitIds(v)) j.generation.finished.insert(member);
          }),
      JobColumn::Real(
          "created_unix", "NOT NULL", [](const JobRecord& j) { return j.info.created_unix(); },
          [](JobRecord& j, double v) { j.info.set_created_unix(v); }),
      JobColumn::Real(
          "updated_unix", "NOT NULL", [](const JobRecord& j) { return j.info.updated_unix(); },
          [](JobRecord& j, double v) { j.info.set_updated_unix(v); }),
      // Added with fault tolerance.
      JobColumn::Integer(
          "gen_formed", "NOT NULL DEFAULT 1", [](const JobRecord& j) { return j.generation.formed; },
          [](JobRecord& j, int64_t v) { j.generation.formed = v != 0; }),
      JobColumn::Text(
          "gen_reason", "NOT NULL DEFAULT ''",
          [](const JobRecord& j) { return std::string(GenerationStartReasonName(j.generation.reason)); },
          [](JobRecord& j, const std::string& v) -> absl::Status {
            // '': a row from before the column; no failure, no release.
            if (v.empty()) return absl::OkStatus();
            std::optional<GenerationStartReason> reason = GenerationStartReasonFromName(v);
            if (!reason.has_value()) return absl::DataLossError(absl::StrCat("unknown generation reason \"", v, "\""));
            j.generation.reason = *reason;
            return absl::OkStatus();
          }),
      JobColumn::Real(
          "gen_started_unix", "NOT NULL DEFAULT 0", [](const JobRecord& j) { return j.generation.started_at; },
          [](JobRecord& j, double v) { j.generation.started_at = v; }),
      JobColumn::Integer(
          "gen_start_step", "NOT NULL DEFAULT 0", [](const JobRecord& j) { return j.generation.start_step; },
          [](JobRecord& j, int64_t v) { j.generation.start_step = v; }),
      JobColumn::Integer(
          "gen_committed", "NOT NULL DEFAULT 0", [](const JobRecord& j) { return j.generation.committed; },
          [](JobRecord& j, int64_t v) { j.generation.committed = v != 0; }),
      JobColumn::Integer(
          "restarts_used", "NOT NULL DEFAULT 0", [](const JobRecord& j) { return j.restarts_used; },
          [](JobRecord& j, int64_t v) { j.restarts_used = v; }),
      JobColumn::Text(
          "last_failure", "NOT NULL DEFAULT ''", [](const JobRecord& j) { return j.last_failure; },
          [](JobRecord& j, const std::string& v) { j.last_failure = v; }),
      JobColumn::Real(
          "waiting_since", "NOT NULL DEFAULT 0", [](const JobRecord& j) { return j.waiting_since; },
          [](JobRecord& j, double v) { j.waiting_since = v; }),
      JobColumn::Text(
          "owner", "NOT NULL DEFAULT ''", [](const JobRecord& j) { return j.info.owner(); },
          [](JobRecord& j, const std::string& v) { j.info.set_owner(v); }),
      JobColumn::Text(
          "release_requested", "NOT NULL DEFAULT '{}'",
          [](const JobRecord& j) { return ReleasesToJson(j.release_requested); },
          [](JobRecord& j, const std::string& v) { return ReleasesFromJson(v, &j.release_requested); }),
      JobColumn::Text(
          "warning", "NOT NULL DEFAULT ''", [](const JobRecord& j) { return j.info.warning(); },
          [](JobRecord& j, const std::string& v) { j.info.set_warning(v); }),
      JobColumn::Real(
          "learning_rate", "NOT NULL DEFAULT 0", [](const JobRecord& j) { return j.info.learning_rate(); },
          [](JobRecord& j, double v) { j.info.set_learning_rate(v); }),
      JobColumn::Text(
          "pending_reason",
          absl::StrCat("NOT NULL DEFAULT '", PendingReasonName(PendingReason::kWaitingForWorkers), "'"),
          [](const JobRecord& j) { return std::string(PendingReasonName(j.pending_reason)); },
          [](JobRecord& j, const std::string& v) -> absl::Status {
            std::optional<PendingReason> reason = PendingReasonFromName(v);
            if (!reason.has_value()) return absl::DataLossError(absl::StrCat("unknown pending reason \"", v, "\""));
            j.pending_reason = *reason;
            return absl::OkStatus();
          })
          .WithBackfill(PendingReasonBackfill()),
      // Added with `herd fetch`.
      JobColumn::Text(
          "final_model", "NOT NULL DEFAULT '[]'",
          [](const JobRecord& j) { return ModelFilesToJson(j.info.final_model()); },
          [](JobRecord& j, const std::string& v) { return ModelFilesFromJson(v, j.info.mutable_final_model()); }),
      JobColumn::Text(
          "served", "NOT NULL DEFAULT '{}'", [](const JobRecord& j) { return ServedToJson(j.served); },
          [](JobRecord& j, const std::string& v) { ServedFromJson(v, &j.served); }),
      // Added with the back-off of members left out (readmit_backoff.h).
      JobColumn::Text(
          "left_out", "NOT NULL DEFAULT '{}'", [](const JobRecord& j) { return LeftOutToJson(j); },
          [](JobRecord& j, const std::string& v) { return LeftOutFromJson(v, &j); }),
  };
}

std::vector<WorkerColumn> WorkerColumns() {
  return {
      WorkerColumn::Text(
          "id", "PRIMARY KEY", [](const WorkerRecord& w) { return w.id; },
          [](WorkerRecord& w, const std::string& v) { w.id = v; }),
      WorkerColumn::Text(
          "address", "NOT NULL", [](const WorkerRecord& w) { return w.address; },
          [](WorkerRecord& w, const std::string& v) { w.address = v; }),
      WorkerColumn::Text(
          "device_kind", "NOT NULL", [](const WorkerRecord& w) { return w.device_kind; },
          [](WorkerRecord& w, const std::string& v) { w.device_kind = v; }),
      WorkerColumn::Integer(
          "device_count", "NOT NULL", [](const WorkerRecord& w) { return w.device_count; },
          [](WorkerRecord& w, int64_t v) { w.device_count = v; }),
      // DEAD or IDLE: a busy worker's job is stored once, in the job's
      // record (its generation's members), and set again at load
      // (AssignMembersOfRunningJobs). An older database's BUSY reads as
      // IDLE until then.
      WorkerColumn::Integer(
          "state", "NOT NULL", [](const WorkerRecord& w) { return w.state == v1::DEAD ? v1::DEAD : v1::IDLE; },
          [](WorkerRecord& w, int64_t v) { w.state = v == v1::DEAD ? v1::DEAD : v1::IDLE; }),
      WorkerColumn::Integer(
          "cordoned", "NOT NULL DEFAULT 0", [](const WorkerRecord& w) { return w.cordoned; },
          [](WorkerRecord& w, int64_t v) { w.cordoned = v != 0; }),
      // Added with worker labels (herd-worker --label).
      WorkerColumn::Text(
          "labels", "NOT NULL DEFAULT '{}'", [](const WorkerRecord& w) { return LabelsToJson(w.labels); },
          [](WorkerRecord& w, const std::string& v) { return LabelsFromJson(v, &w.labels); }),
  };
}

std::vector<CheckpointColumn> CheckpointColumns() {
  return {
      CheckpointColumn::Text(
          "id", "PRIMARY KEY", [](const StoredCheckpoint& c) { return c.info.id(); },
          [](StoredCheckpoint& c, const std::string& v) { c.info.set_id(v); }),
      CheckpointColumn::Text(
          "job_id", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.job_id(); },
          [](StoredCheckpoint& c, const std::string& v) { c.info.set_job_id(v); }),
      CheckpointColumn::Integer(
          "commit_seq", "NOT NULL", [](const StoredCheckpoint& c) { return c.commit_seq; },
          [](StoredCheckpoint& c, int64_t v) { c.commit_seq = v; }),
      CheckpointColumn::Integer(
          "step", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.step(); },
          [](StoredCheckpoint& c, int64_t v) { c.info.set_step(v); }),
      CheckpointColumn::Integer(
          "epoch", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.epoch(); },
          [](StoredCheckpoint& c, int64_t v) { c.info.set_epoch(v); }),
      CheckpointColumn::Integer(
          "generation", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.generation(); },
          [](StoredCheckpoint& c, int64_t v) { c.info.set_generation(v); }),
      CheckpointColumn::Text(
          "path", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.path(); },
          [](StoredCheckpoint& c, const std::string& v) { c.info.set_path(v); }),
      CheckpointColumn::Integer(
          "size_bytes", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.size_bytes(); },
          [](StoredCheckpoint& c, int64_t v) { c.info.set_size_bytes(v); }),
      CheckpointColumn::Text(
          "sha256", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.sha256(); },
          [](StoredCheckpoint& c, const std::string& v) { c.info.set_sha256(v); }),
      CheckpointColumn::Real(
          "created_unix", "NOT NULL", [](const StoredCheckpoint& c) { return c.info.created_unix(); },
          [](StoredCheckpoint& c, double v) { c.info.set_created_unix(v); }),
      CheckpointColumn::Integer(
          "samples_in_epoch", "NOT NULL DEFAULT 0", [](const StoredCheckpoint& c) { return c.info.samples_in_epoch(); },
          [](StoredCheckpoint& c, int64_t v) { c.info.set_samples_in_epoch(v); }),
  };
}

}  // namespace

// Written until the generation's epoch, position in the epoch and heal
// source left the wire (JoinGenerationResponse reserves them): nothing read
// them. Dropped rather than left unread, so the table says what the code
// means (SQLite has DROP COLUMN since 3.35; Debian 12 ships 3.40). An older
// coordinator opening the database adds them back with their defaults.
const sql::Table<JobRecord>& JobsTable() {
  static const auto* table = new sql::Table<JobRecord>(
      "jobs", JobColumns(), /*retired=*/{"gen_epoch", "gen_samples_in_epoch", "gen_heal_from_rank"});
  return *table;
}

const sql::Table<WorkerRecord>& WorkersTable() {
  static const auto* table = new sql::Table<WorkerRecord>("workers", WorkerColumns(), /*retired=*/{"job_id"});
  return *table;
}

const sql::Table<StoredCheckpoint>& CheckpointsTable() {
  static const auto* table = new sql::Table<StoredCheckpoint>("checkpoints", CheckpointColumns());
  return *table;
}

}  // namespace herd::coordinator
