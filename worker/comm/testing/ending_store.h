// A RendezvousStore whose generation can be ended, for tests: once End() is
// called every call fails, as the coordinator's per-generation store does for
// a generation it has ended (a member died and the next generation formed
// without it). Counts reads per key, so a test can end the generation while
// a rank is waiting in a known place.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "worker/comm/communicator.h"
#include "worker/comm/in_memory_store.h"

namespace herd {

class EndingStore : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    if (ended_) return Ended();
    return inner_.Set(key, value);
  }
  absl::Status Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++reads_[key];
    }
    if (ended_) return Ended();
    return inner_.Get(key, timeout, value);
  }
  void End() { ended_ = true; }
  int reads(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reads_.find(key);
    return it == reads_.end() ? 0 : it->second;
  }
  static constexpr const char* kEndedMessage = "the generation is over";

 private:
  static absl::Status Ended() { return absl::FailedPreconditionError(kEndedMessage); }
  InMemoryStore inner_;
  std::atomic<bool> ended_{false};
  mutable std::mutex mu_;
  std::map<std::string, int> reads_;
};

}  // namespace herd
