// A RendezvousStore kept in this process's memory: for tests and for
// single-process runs where every rank is a thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "worker/comm/communicator.h"

namespace herd {

class InMemoryStore : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::Status Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace herd
