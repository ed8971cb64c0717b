#include "worker/train/checkpoint/checkpoint_files.h"

#include <glog/logging.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/paths.h"

namespace herd {
namespace {

namespace fs = std::filesystem;

constexpr char kManifest[] = "MANIFEST";
constexpr char kStepPrefix[] = "step-";

absl::Status WriteFileSynced(const fs::path& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path.string(), ": ", strerror(errno)));
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path.string(), ": ", strerror(errno)));
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    return absl::InternalError(absl::StrCat("cannot sync ", path.string(), ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const fs::path& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", dir.string(), ": ", strerror(errno)));
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot sync ", dir.string(), ": ", strerror(errno)));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat("checkpoint file missing: ", path.string()));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool ValidName(const std::string& name) {
  return !name.empty() && name != kManifest && name.find('/') == std::string::npos && name[0] != '.';
}

}  // namespace

int SweepCheckpointLeftovers(const std::string& root, const std::string& job_id) {
  auto job_dir = ResolveUnderRoot(root, job_id);
  if (!job_dir.ok()) return 0;
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(*job_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(".tmp-", 0) != 0) continue;
    std::error_code ignored;
    if (fs::remove_all(it->path(), ignored) > 0) ++removed;
  }
  if (removed > 0) LOG(INFO) << "removed " << removed << " leftover temporary checkpoint folder(s) under " << *job_dir;
  return removed;
}


absl::StatusOr<CheckpointFolder> WriteCheckpointFolder(const std::string& root, const std::string& job_id,
                                                       int64_t step, const std::map<std::string, std::string>& files) {
  auto job_dir = ResolveUnderRoot(root, job_id);
  if (!job_dir.ok()) return job_dir.status();
  std::error_code ec;
  fs::create_directories(*job_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", *job_dir, ": ", ec.message()));

  const std::string name = absl::StrFormat("%s%010d", kStepPrefix, step);
  const fs::path final_dir = fs::path(*job_dir) / name;
  const fs::path tmp_dir = fs::path(*job_dir) / absl::StrCat(".tmp-", name, "-", getpid());
  fs::remove_all(tmp_dir, ec);
  fs::create_directory(tmp_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", tmp_dir.string(), ": ", ec.message()));
  // A write that fails anywhere below leaves nothing behind.
  struct RemoveOnFailure {
    fs::path dir;
    bool published = false;
    ~RemoveOnFailure() {
      std::error_code ignored;
      if (!published) fs::remove_all(dir, ignored);
    }
  } cleanup{tmp_dir};

  CheckpointFolder folder;
  folder.relative_path = absl::StrCat(job_id, "/", name);
  folder.step = step;
  std::string manifest;
  for (const auto& [file, data] : files) {
    if (!ValidName(file)) return absl::InvalidArgumentError(absl::StrCat("bad checkpoint file name: ", file));
    if (auto s = WriteFileSynced(tmp_dir / file, data); !s.ok()) return s;
    absl::StrAppend(&manifest, Sha256Hex(data), " ", data.size(), " ", file, "\n");
    folder.size_bytes += static_cast<int64_t>(data.size());
  }
  // The manifest goes last: a folder with a manifest has all its files.
  if (auto s = WriteFileSynced(tmp_dir / kManifest, manifest); !s.ok()) return s;
  if (auto s = SyncDirectory(tmp_dir); !s.ok()) return s;
  folder.manifest_sha256 = Sha256Hex(manifest);

  // An older folder of the same step (a re-run after rollback) is replaced.
  if (fs::exists(final_dir)) fs::remove_all(final_dir, ec);
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot publish ", final_dir.string(), ": ", ec.message()));
  cleanup.published = true;
  if (auto s = SyncDirectory(*job_dir); !s.ok()) return s;
  return folder;
}

absl::StatusOr<std::map<std::string, std::string>> ReadCheckpointFolder(const std::string& root,
                                                                        const std::string& relative_path) {
  auto dir = ResolveUnderRoot(root, relative_path);
  if (!dir.ok()) return dir.status();
  auto manifest = ReadWholeFile(fs::path(*dir) / kManifest);
  if (!manifest.ok()) return manifest.status();
  std::map<std::string, std::string> files;
  for (absl::string_view line : absl::StrSplit(*manifest, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    int64_t size = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &size) || !ValidName(parts[2])) {
      return absl::DataLossError(absl::StrCat(relative_path, ": malformed MANIFEST line: ", line));
    }
    auto data = ReadWholeFile(fs::path(*dir) / parts[2]);
    if (!data.ok()) return data.status();
    if (static_cast<int64_t>(data->size()) != size) {
      return absl::DataLossError(absl::StrCat(relative_path, "/", parts[2], ": size ", data->size(),
                                              " differs from the manifest's ", size));
    }
    if (Sha256Hex(*data) != parts[0]) {
      return absl::DataLossError(absl::StrCat(relative_path, "/", parts[2], ": SHA-256 mismatch (corrupt)"));
    }
    files[parts[2]] = std::move(*data);
  }
  if (files.empty()) return absl::DataLossError(absl::StrCat(relative_path, ": empty MANIFEST"));
  return files;
}

std::vector<CheckpointFolder> ListCheckpointFolders(const std::string& root, const std::string& job_id) {
  std::vector<CheckpointFolder> out;
  auto job_dir = ResolveUnderRoot(root, job_id);
  std::error_code ec;
  if (!job_dir.ok() || !fs::is_directory(*job_dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(*job_dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (name.rfind(kStepPrefix, 0) != 0 || !absl::SimpleAtoi(name.substr(sizeof(kStepPrefix) - 1), &step)) continue;
    if (!fs::exists(entry.path() / kManifest, ec)) continue;
    CheckpointFolder folder;
    folder.relative_path = absl::StrCat(job_id, "/", name);
    folder.step = step;
    out.push_back(folder);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

absl::Status DeleteCheckpointFolder(const std::string& root, const std::string& relative_path) {
  auto dir = ResolveUnderRoot(root, relative_path);
  if (!dir.ok()) return dir.status();
  if (fs::path(*dir) == fs::weakly_canonical(root)) return absl::InvalidArgumentError("refusing to delete the root");
  std::error_code ec;
  fs::remove_all(*dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot delete ", *dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace herd
