// An audit trail of which samples each trainer consumed, for proving
// exactly-once consumption across failures (HERD_SAMPLE_LEDGER_DIR).
//
// Each trainer process appends lines to its own file:
//   start <generation> <step> <epoch> <samples_in_epoch>   (a generation begins)
//   step <generation> <step> <epoch> <id>...               (this rank's samples)
// One write(2) per line, so a SIGKILL never leaves a torn line.
//
// Replay: a step record belongs to the job's history unless a later
// generation started at or before its step (that generation rolled it back
// and re-ran it). What stays must hold every sample of each epoch once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd {

inline constexpr char kSampleLedgerDirEnv[] = "HERD_SAMPLE_LEDGER_DIR";

class SampleLedger {
 public:
  // A ledger in $HERD_SAMPLE_LEDGER_DIR, or null when the variable is unset.
  // Its file name starts with the job id and a dot, so tests running several
  // jobs replay each job's files alone.
  static absl::StatusOr<std::unique_ptr<SampleLedger>> FromEnvironment(const std::string& job_id,
                                                                       const std::string& worker_id);
  ~SampleLedger();

  void GenerationStart(int64_t generation, int64_t step, int64_t epoch, int64_t samples_in_epoch);
  void Step(int64_t generation, int64_t step, int64_t epoch, const std::vector<int64_t>& ids);

 private:
  explicit SampleLedger(int fd) : fd_(fd) {}
  void Append(const std::string& line);
  int fd_;
};

struct LedgerReplay {
  // epoch -> sample ids of the steps that stayed in the history, with repeats.
  std::map<int64_t, std::vector<int64_t>> committed;
  int64_t rolled_back_records = 0;  // step records later generations re-ran
  std::map<int64_t, int64_t> generation_start_step;
};

// Replays the contents of every ledger file of a job. INVALID_ARGUMENT on a
// malformed line or when ranks disagree on where a generation started.
absl::StatusOr<LedgerReplay> ReplayLedgers(const std::vector<std::string>& contents);

}  // namespace herd
