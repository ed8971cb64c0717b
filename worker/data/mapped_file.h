// A read-only memory mapping of a whole data file. Datasets larger than
// memory live here: the kernel pages in what a batch touches and drops
// clean pages under memory pressure, so a trainer's own memory does not grow
// with the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace herd {

class MappedFile {
 public:
  // Maps `path` read-only. `field` names the spec field for errors
  // ("dataset.path"). Refused, naming the file: one the trainer may not read
  // (it reads with the worker's own rights, docs/security.md), one that is
  // not a regular file (a folder, a FIFO, a device), one that is empty.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& field, const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, int64_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  int64_t size_;
};

}  // namespace herd
