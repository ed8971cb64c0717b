// A RendezvousStore in a directory, so rank processes forked by a benchmark
// can find each other the way trainers do through the coordinator's KV store.
#pragma once

#include <chrono>
#include <string>

#include "worker/comm/communicator.h"

namespace herd::bench {

class FileStore : public RendezvousStore {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}

  // Written to a temporary name and renamed, so readers never see half a value.
  absl::Status Set(const std::string& key, const std::string& value) override;
  // Polls every millisecond: rendezvous happens once per run.
  absl::Status Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override;

 private:
  std::string PathFor(const std::string& key) const;

  std::string directory_;
};

}  // namespace herd::bench
