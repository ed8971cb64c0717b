// A real herd-coordinator process for the control-plane benchmark: started
// with its flags, found through its ready file, measured through /proc, and
// stopped with SIGTERM like a deployment would.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::bench {

struct CoordinatorProcessOptions {
  std::string binary;     // herd-coordinator
  std::string directory;  // holds state/, ready.json and coordinator.log
  // --store=STORE (e.g. etcd://127.0.0.1:2379); "" keeps the state in
  // SQLite under directory/state.
  std::string store;
  double lease_seconds = 10;
  std::vector<std::string> extra_args;
  std::chrono::seconds ready_timeout{60};
};

class CoordinatorProcess {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(const CoordinatorProcessOptions& options);
  ~CoordinatorProcess();  // Stop(), then SIGKILL if it is still there

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }  // host:port of the gRPC API
  const std::string& log_path() const { return log_path_; }

  // Resident and peak resident memory in KiB (VmRSS, VmHWM of /proc/PID/status).
  absl::StatusOr<int64_t> RssKiB() const { return StatusField("VmRSS:"); }
  absl::StatusOr<int64_t> PeakRssKiB() const { return StatusField("VmHWM:"); }

  // SIGTERM and wait up to `timeout` for a clean exit; its exit code.
  absl::StatusOr<int> Stop(std::chrono::seconds timeout = std::chrono::seconds(20));

 private:
  CoordinatorProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  absl::StatusOr<int64_t> StatusField(const std::string& field) const;

  pid_t pid_;
  std::string log_path_;
  std::string address_;
  bool exited_ = false;
};

}  // namespace herd::bench
