// Presents a RendezvousStore as the gloo::rendezvous::Store Gloo's
// connectFullMesh expects: keys get this generation's prefix, reads wait up
// to the timeout, and failures are thrown as gloo::IoException (Gloo's error
// convention). The failure is also kept as an absl::Status so the caller can
// report DEADLINE_EXCEEDED vs UNAVAILABLE precisely.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace herd {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<RendezvousStore> store, std::string key_prefix,
                   std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // The failure behind the last exception thrown; OK if none.
  const absl::Status& last_error() const { return last_error_; }

 private:
  // Fetches into fetched_ (so get() after wait() costs no second round trip).
  absl::Status Fetch(const std::string& key, std::chrono::milliseconds timeout);
  [[noreturn]] void Fail(absl::Status status);

  std::shared_ptr<RendezvousStore> store_;
  std::string key_prefix_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, std::string> fetched_;
  absl::Status last_error_;
};

}  // namespace herd
