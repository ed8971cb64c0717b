// The contract between herd-worker and the herd-trainer processes it starts:
// the files each trainer keeps in its job dir (the daemon passes the dir as
// --work-dir and reads the files) and what they hold. What a trainer's exit
// code means is GenerationOutcome (worker/contract/generation_outcome.h);
// the command line has one owner, worker/contract/trainer_args.h (built
// there for the daemon's trainer_command, parsed there for trainer_main).
//
//   trainer.log          the trainer's stdout and stderr (the daemon redirects)
//   termination-message  why it failed, one line (written on a failed exit)
//   trainer.alive        mtime: the trainer is making progress (the daemon's
//                        stuck check); contents: the last generation joined
//   metrics.snapshot     its Prometheus metrics, rewritten every second
//   final-report         its last progress report (ReportProgressRequest),
//                        written before a successful exit so the final step,
//                        loss and evaluation reach the coordinator with the
//                        exit even when the coordinator was down at the end;
//                        written before a released exit too (the boundary's)
//   unrecorded-checkpoints  checkpoint records (CheckpointRecords) the
//                        coordinator had not acknowledged when the trainer
//                        exited, whatever the exit: the daemon delivers them
//                        (a checkpoint written as the coordinator went down
//                        is recorded, or removed when refused)
//   release-request      written by the daemon when the coordinator asks this
//                        worker to leave the job at its next step boundary
//                        (drain, shrink, suspend); the trainer checks for it at
//                        commit points, and the daemon removes it before
//                        starting a trainer for the job. One line of decimal
//                        numbers, "GENERATION RANK RANK ...": the generation
//                        asked and the ranks that leave (every rank when the
//                        whole job leaves); a trainer of another generation
//                        ignores it
//   reform-request       written by the daemon when the coordinator asks the
//                        job to re-form at its next step boundary so workers
//                        can join; holds the generation asked (decimal), so
//                        a trainer of a later generation ignores it
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd {

std::string TrainerLogPath(const std::string& job_dir);
std::string TerminationMessagePath(const std::string& job_dir);
std::string TrainerAlivePath(const std::string& job_dir);
std::string MetricsSnapshotPath(const std::string& job_dir);
std::string FinalReportPath(const std::string& job_dir);
std::string ReleaseRequestPath(const std::string& job_dir);
std::string ReformRequestPath(const std::string& job_dir);
std::string UnrecordedCheckpointsPath(const std::string& job_dir);

absl::Status WriteFinalReport(const std::string& path, const v1::ReportProgressRequest& report);
// What a release-request file asks: the ranks of `generation` that leave the
// job at its next step boundary (HeartbeatResponse.leavers). generation 0:
// no (readable) request.
struct LeaveRequest {
  int64_t generation = 0;
  std::vector<int64_t> ranks;
  bool operator==(const LeaveRequest& o) const { return generation == o.generation && ranks == o.ranks; }
};
// Replaces the file atomically, as WriteReformRequest.
absl::Status WriteReleaseRequest(const std::string& path, const LeaveRequest& request);
LeaveRequest ReadReleaseRequest(const std::string& path);

// Replaces the file atomically: a trainer never reads half a number.
absl::Status WriteReformRequest(const std::string& path, int64_t generation);
// The generation asked; 0 when there is no (readable) request.
int64_t ReadReformRequest(const std::string& path);

// NOT_FOUND when the trainer wrote none; DATA_LOSS when it does not parse.
absl::StatusOr<v1::ReportProgressRequest> ReadFinalReport(const std::string& path);

absl::Status WriteUnrecordedCheckpoints(const std::string& path, const v1::CheckpointRecords& records);
// NOT_FOUND when the trainer wrote none; DATA_LOSS when it does not parse.
absl::StatusOr<v1::CheckpointRecords> ReadUnrecordedCheckpoints(const std::string& path);

}  // namespace herd
