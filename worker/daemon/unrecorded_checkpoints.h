// Checkpoint records a trainer left unacknowledged at its exit
// (trainer_contract.h: unrecorded-checkpoints). The daemon delivers them to
// the coordinator with its own credential (its trainers use the same one)
// before the exit itself, retrying while the coordinator is unreachable: a
// checkpoint written as the coordinator went down is recorded once it is
// back, and retention deletes what the answer names. A record refused for
// good (its generation ended, the job is gone) will never be listed: its
// folder is removed, so nothing stays on disk outside the catalog and
// checkpoint.keep.
#pragma once

#include <deque>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd::worker {

// Whether a CommitCheckpoint answer refuses the record for good (a retry
// gets the same answer) rather than failing for now.
bool RefusedForGood(const absl::Status& status);

class UnrecordedCheckpoints {
 public:
  using CommitFn = std::function<absl::StatusOr<v1::CommitCheckpointResponse>(const v1::CommitCheckpointRequest&)>;

  explicit UnrecordedCheckpoints(std::string checkpoint_root) : root_(std::move(checkpoint_root)) {}

  void Add(const v1::CheckpointRecords& records);
  // Sends the pending records oldest first through `commit`, until one fails
  // for now (it and the rest wait for the next call). True when none is left.
  bool Deliver(const CommitFn& commit);
  bool empty() const { return pending_.empty(); }

 private:
  // Removes the folder of a refused record, if it is still that record's
  // (its MANIFEST digest matches): a step written again is another's.
  void RemoveRefused(const v1::CommitCheckpointRequest& record, const absl::Status& why);

  const std::string root_;
  std::deque<v1::CommitCheckpointRequest> pending_;
};

}  // namespace herd::worker
