#include "worker/contract/trainer_contract.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"

namespace herd {

std::string TrainerLogPath(const std::string& job_dir) { return absl::StrCat(job_dir, "/trainer.log"); }
std::string TerminationMessagePath(const std::string& job_dir) {
  return absl::StrCat(job_dir, "/termination-message");
}
std::string TrainerAlivePath(const std::string& job_dir) { return absl::StrCat(job_dir, "/trainer.alive"); }
std::string MetricsSnapshotPath(const std::string& job_dir) { return absl::StrCat(job_dir, "/metrics.snapshot"); }
std::string FinalReportPath(const std::string& job_dir) { return absl::StrCat(job_dir, "/final-report"); }
std::string ReleaseRequestPath(const std::string& job_dir) { return absl::StrCat(job_dir, "/release-request"); }
std::string ReformRequestPath(const std::string& job_dir) { return absl::StrCat(job_dir, "/reform-request"); }
std::string UnrecordedCheckpointsPath(const std::string& job_dir) {
  return absl::StrCat(job_dir, "/unrecorded-checkpoints");
}

// "GENERATION RANK RANK ...": one line of decimal numbers.
absl::Status WriteReleaseRequest(const std::string& path, const LeaveRequest& request) {
  return WriteFileAtomically(path, absl::StrCat(request.generation, " ", absl::StrJoin(request.ranks, " ")));
}

LeaveRequest ReadReleaseRequest(const std::string& path) {
  std::ifstream in(path);
  LeaveRequest request;
  if (!(in >> request.generation) || request.generation <= 0) return LeaveRequest{};
  for (int64_t rank; in >> rank;) {
    if (rank < 0) return LeaveRequest{};
    request.ranks.push_back(rank);
  }
  if (!in.eof()) return LeaveRequest{};  // not all numbers: unreadable
  return request;
}

absl::Status WriteReformRequest(const std::string& path, int64_t generation) {
  return WriteFileAtomically(path, absl::StrCat(generation));
}

int64_t ReadReformRequest(const std::string& path) {
  std::ifstream in(path);
  int64_t generation = 0;
  if (!(in >> generation)) return 0;
  return generation;
}

namespace {

absl::Status WriteMessage(const std::string& path, const google::protobuf::Message& message, const char* what) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) return absl::InternalError(absl::StrCat("cannot serialize the ", what));
  AtomicWriteOptions durable;
  durable.durable = true;
  return WriteFileAtomically(path, bytes, durable);
}

absl::Status ReadMessage(const std::string& path, google::protobuf::Message* message, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no ", what, " at ", path));
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!message->ParseFromString(bytes.str())) {
    return absl::DataLossError(absl::StrCat("the ", what, " ", path, " does not parse"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFinalReport(const std::string& path, const v1::ReportProgressRequest& report) {
  return WriteMessage(path, report, "final report");
}

absl::StatusOr<v1::ReportProgressRequest> ReadFinalReport(const std::string& path) {
  v1::ReportProgressRequest report;
  if (auto s = ReadMessage(path, &report, "final report"); !s.ok()) return s;
  return report;
}

absl::Status WriteUnrecordedCheckpoints(const std::string& path, const v1::CheckpointRecords& records) {
  return WriteMessage(path, records, "unrecorded checkpoint records");
}

absl::StatusOr<v1::CheckpointRecords> ReadUnrecordedCheckpoints(const std::string& path) {
  v1::CheckpointRecords records;
  if (auto s = ReadMessage(path, &records, "unrecorded checkpoint records"); !s.ok()) return s;
  return records;
}

}  // namespace herd
