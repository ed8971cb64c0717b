#include "client/model_download.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/model_files.h"

namespace herd::client {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelDownload>> ModelDownload::Start(const std::string& destination) {
  const std::string temporary = absl::StrCat(FolderOf(destination), "/.", BaseName(destination), ".part-", getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", temporary, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<ModelDownload>(new ModelDownload(destination, temporary, file));
}

ModelDownload::~ModelDownload() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) std::remove(temporary_.c_str());
}

absl::Status ModelDownload::Append(absl::string_view data) {
  if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot write ", temporary_, ": ", std::strerror(errno)));
  }
  digest_.Update(data);
  bytes_ += static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::Status ModelDownload::Finish(int64_t expected_size, const std::string& expected_sha256) {
  const std::string got = digest_.FinishHex();
  if (expected_size >= 0 && bytes_ != expected_size) {
    return absl::DataLossError(absl::StrCat(BaseName(destination_), ": received ", bytes_, " bytes, the job recorded ",
                                            expected_size, "; nothing was written"));
  }
  if (got != expected_sha256) {
    return absl::DataLossError(absl::StrCat(BaseName(destination_), ": SHA-256 ", got, " differs from the recorded ",
                                            expected_sha256, "; nothing was written"));
  }
  const bool flushed = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  const int error = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!flushed || !closed)
    return absl::ResourceExhaustedError(absl::StrCat("cannot write ", temporary_, ": ", std::strerror(error)));
  if (std::rename(temporary_.c_str(), destination_.c_str()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", temporary_, " to ", destination_, ": ", std::strerror(errno)));
  }
  finished_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, ManifestEntry>> ParseManifest(absl::string_view text) {
  std::map<std::string, ManifestEntry> entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_number;
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    ManifestEntry entry;
    if (parts.size() != 3 || parts[0].size() != 64 || !absl::SimpleAtoi(parts[1], &entry.size_bytes) ||
        entry.size_bytes < 0 || !IsPlainFileName(parts[2]) || parts[2] == kCheckpointManifestFile) {
      return absl::DataLossError(absl::StrCat("MANIFEST line ", line_number, " is not \"<sha256> <size> <name>\""));
    }
    entry.sha256 = parts[0];
    entries[parts[2]] = entry;
  }
  return entries;
}

}  // namespace herd::client
