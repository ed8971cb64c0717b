#include "worker/daemon/unrecorded_checkpoints.h"

#include <glog/logging.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "worker/train/checkpoint/checkpoint_files.h"

namespace herd::worker {

bool RefusedForGood(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kFailedPrecondition:  // fenced: its generation ended
    case absl::StatusCode::kNotFound:            // the job is gone
    case absl::StatusCode::kInvalidArgument:     // a bad record
      return true;
    default:
      return false;
  }
}

void UnrecordedCheckpoints::Add(const v1::CheckpointRecords& records) {
  for (const v1::CommitCheckpointRequest& record : records.records()) pending_.push_back(record);
}

bool UnrecordedCheckpoints::Deliver(const CommitFn& commit) {
  while (!pending_.empty()) {
    const v1::CommitCheckpointRequest& record = pending_.front();
    absl::StatusOr<v1::CommitCheckpointResponse> answer = commit(record);
    if (answer.ok()) {
      LOG(INFO) << "job " << record.job_id() << ": checkpoint at step " << record.step() << " (" << record.path()
                << ") recorded for its exited trainer as " << answer->checkpoint().id();
      for (const std::string& old : answer->delete_paths()) {
        if (auto s = DeleteCheckpointFolder(root_, old); !s.ok()) LOG(WARNING) << s;
      }
    } else if (RefusedForGood(answer.status())) {
      RemoveRefused(record, answer.status());
    } else {
      LOG(WARNING) << "job " << record.job_id() << ": recording the checkpoint at step " << record.step()
                   << " for its exited trainer failed (retrying): " << answer.status();
      return false;
    }
    pending_.pop_front();
  }
  return true;
}

void UnrecordedCheckpoints::RemoveRefused(const v1::CommitCheckpointRequest& record, const absl::Status& why) {
  std::ifstream manifest(absl::StrCat(root_, "/", record.path(), "/MANIFEST"), std::ios::binary);
  std::stringstream bytes;
  bytes << manifest.rdbuf();
  if (!manifest || Sha256Hex(bytes.str()) != record.sha256()) {
    LOG(WARNING) << "job " << record.job_id() << ": the checkpoint at step " << record.step()
                 << " was refused (" << why.message() << "); its folder " << record.path()
                 << " holds another checkpoint now or is gone: left as it is";
    return;
  }
  absl::Status removed = DeleteCheckpointFolder(root_, record.path());
  LOG(WARNING) << "job " << record.job_id() << ": the checkpoint at step " << record.step() << " was refused ("
               << why.message() << "): " << (removed.ok() ? "removed " : "cannot remove ") << record.path()
               << (removed.ok() ? "" : absl::StrCat(": ", removed.message()));
}

}  // namespace herd::worker
