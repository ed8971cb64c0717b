// Durable, verifiable checkpoint folders. No LibTorch here: this layer moves
// bytes; the trainer decides what goes in them.
//
// A checkpoint is a folder ROOT/JOB/step-NNNNNNNNNN/ holding payload files and
// MANIFEST (one line per payload file: "<sha256> <size> <name>"). It is
// written as ROOT/JOB/.tmp-step-N-PID/ (every file fsync'd, MANIFEST last),
// renamed into place, and the parent folder fsync'd: a crash at any point
// leaves either no folder or a complete one, never a half-written step-N.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sha256.h"  // Sha256Hex, the manifest's digests

namespace herd {

struct CheckpointFolder {
  std::string relative_path;  // JOB/step-N, relative to the root
  int64_t step = 0;
  int64_t size_bytes = 0;          // payload bytes
  std::string manifest_sha256;     // hex digest of MANIFEST itself
};

// Writes `files` (name -> contents) as the checkpoint of `step` for `job_id`.
absl::StatusOr<CheckpointFolder> WriteCheckpointFolder(const std::string& root, const std::string& job_id,
                                                       int64_t step, const std::map<std::string, std::string>& files);

// Reads and verifies a checkpoint (every file's size and SHA-256 against the
// manifest); DATA_LOSS naming the bad file when anything differs.
absl::StatusOr<std::map<std::string, std::string>> ReadCheckpointFolder(const std::string& root,
                                                                        const std::string& relative_path);

// Complete checkpoints of a job on disk, newest first (temp folders of
// interrupted writes are ignored; use ReadCheckpointFolder to verify).
std::vector<CheckpointFolder> ListCheckpointFolders(const std::string& root, const std::string& job_id);

// Removes temporary folders that interrupted writes of `job_id` left (a
// crash, a full disk); call when no write of the job is under way. Returns
// how many it removed.
int SweepCheckpointLeftovers(const std::string& root, const std::string& job_id);

// Removes a checkpoint folder (retention); the path must stay under root.
absl::Status DeleteCheckpointFolder(const std::string& root, const std::string& relative_path);

}  // namespace herd
