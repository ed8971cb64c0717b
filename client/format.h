// How the CLI shows jobs, workers and checkpoints: tables, a detail block,
// JSON, durations. Pure functions of their inputs.
#pragma once

#include <google/protobuf/map.h>
#include <google/protobuf/message.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd::client {

// "RUNNING", "SUCCEEDED", ...
std::string JobStateName(v1::JobState state);
std::string WorkerStateName(v1::WorkerState state);
// The state with what limits scheduling on it: "IDLE,CORDONED", "BUSY,DRAINING".
std::string WorkerStateLabel(const v1::WorkerInfo& worker);
bool IsFinalState(v1::JobState state);

// "45s", "1m05s", "2h03m", "3d04h"; negative counts as zero.
std::string FormatDuration(double seconds);
// Coarse age for tables: "45s", "3m", "2h", "4d".
std::string FormatAge(double seconds);
// "512 B", "1.5 KiB", "12.3 MiB", ...
std::string FormatBytes(int64_t bytes);
// "accuracy 0.86 loss 0.412", keys sorted; "" when empty.
std::string FormatEval(const google::protobuf::Map<std::string, double>& eval);
std::string FormatLoss(double loss);
// "420/1000", or "420" when the total is unknown.
std::string FormatStep(const v1::JobInfo& job);

// "41 ms", "2.5 ms", "12.3 s": a per-step time.
std::string FormatStepTime(double seconds);
// The slowest rank of a running job's last log interval (JobInfo.straggler),
// for `herd status`: "2 (worker-2) 41 ms/step compute vs 20 ms median; the
// others wait 21 ms/step (48% of a step)". "" when there is nothing
// meaningful to show: fewer than 2 ranks, no measurement, or the job is not
// running.
std::string FormatStraggler(const v1::JobInfo& job);
// "rounds merge 13 local step(s) after launch (overlap_steps auto: a round
// takes 902 ms in flight, a step 71.3 ms)"; "" without overlapped rounds.
std::string FormatOverlap(const v1::JobInfo& job);
// Mode average with int8 rounds: their shape now, e.g. "int8, gather (one
// hop)"; "" without int8 rounds.
std::string FormatRoundShape(const v1::JobInfo& job);
// The short form for `herd watch`: "slowest rank 2 (worker-2) +21 ms/step
// (48%)"; "" as above.
std::string FormatStragglerShort(const v1::JobInfo& job);

// One JSON object on one line, with the proto's field names, every
// primitive field present even when zero, enums by name.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

// Tables with aligned columns; `now` (Unix seconds) for the AGE column.
std::string JobsTable(const std::vector<v1::JobInfo>& jobs, double now);
std::string WorkersTable(const std::vector<v1::WorkerInfo>& workers, double now);
std::string CheckpointsTable(const std::vector<v1::CheckpointInfo>& checkpoints, double now);

// A readable multi-line block for `herd status`; with 2+ ranks, RanksTable
// below it.
std::string JobDetail(const v1::JobInfo& job, double now);

// Each rank of a running job over its last log interval (JobInfo.ranks):
// compute and wait per step, its batch share now (and the one it ran on, if a
// re-plan changed it), and which rank is the slowest. "" when FormatStraggler
// shows nothing or the ranks do not match the world size.
std::string RanksTable(const v1::JobInfo& job);

}  // namespace herd::client
