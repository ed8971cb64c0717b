// One file of `herd fetch` as it arrives: written to a temporary file beside
// its destination, hashed on the way, and renamed to the destination only
// when its size and SHA-256 match what the job recorded. A failed or
// abandoned download leaves nothing under the destination's name.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sha256.h"

namespace herd::client {

class ModelDownload {
 public:
  // `destination`'s folder must exist. The temporary file is
  // ".NAME.part-PID" in that folder.
  static absl::StatusOr<std::unique_ptr<ModelDownload>> Start(const std::string& destination);
  ~ModelDownload();  // removes the temporary file unless Finish succeeded

  absl::Status Append(absl::string_view data);
  int64_t bytes() const { return bytes_; }
  // Checks the size (when `expected_size` >= 0) and the digest, makes the
  // file durable and renames it into place; DATA_LOSS naming the file and
  // both digests (or sizes) when they differ.
  absl::Status Finish(int64_t expected_size, const std::string& expected_sha256);

 private:
  ModelDownload(std::string destination, std::string temporary, std::FILE* file)
      : destination_(std::move(destination)), temporary_(std::move(temporary)), file_(file) {}

  const std::string destination_;
  const std::string temporary_;
  std::FILE* file_;
  Sha256Stream digest_;
  int64_t bytes_ = 0;
  bool finished_ = false;
};

// A checkpoint MANIFEST ("<sha256> <size> <name>" a line): name -> (size,
// sha256). DATA_LOSS naming the line when one does not parse or a name
// would leave the checkpoint's folder.
struct ManifestEntry {
  int64_t size_bytes = 0;
  std::string sha256;
};
absl::StatusOr<std::map<std::string, ManifestEntry>> ParseManifest(absl::string_view text);

}  // namespace herd::client
