// A real herd cluster on loopback for tests: herd-coordinator and
// herd-worker processes (which start real herd-trainer processes), driven
// through the real `herd` CLI binary.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/harness/credentials.h"
#include "tests/harness/process.h"

namespace herd::testing {

// Where a worker daemon runs (and so its trainers): by default this
// machine's loopback; with a testbed (tests/testbed), a host of it.
struct WorkerHost {
  std::string address;                   // its --listen (trainers' Gloo address) and metrics host
  std::vector<std::string> exec_prefix;  // prepended to its command line, e.g. `ip netns exec NS`
};

struct ClusterOptions {
  int workers = 2;
  bool auth = true;
  double lease_seconds = 4;
  // 0 picks a free port once; restarts reuse it so workers find the new
  // coordinator at the old address.
  int coordinator_port = 0;
  // Extra NAME=value entries for the worker daemons (and so their trainers).
  std::vector<std::string> worker_env;
  // The workers' --checkpoint-root; empty: ROOT/checkpoints.
  std::string checkpoint_root;
  // The coordinator's --state-dir; empty: ROOT/state.
  std::string state_dir;
  // The coordinator's --store (e.g. etcd://...) in place of --state-dir.
  std::string store;
  // What workers and the CLI are given as --coordinator (e.g. the addresses
  // of a leader and its standbys); empty: the coordinator's address.
  std::string coordinator_addresses;
  // The coordinator's listen address; workers on other hosts need one they
  // can reach (a testbed's root_address()).
  std::string coordinator_host = "127.0.0.1";
  // Prepended to the coordinator's command line, e.g. a testbed host's
  // `ip netns exec NS` to run it on that host (coordinator_host its address).
  std::vector<std::string> coordinator_exec_prefix;
  // Extra herd-coordinator flags ("--max-pending-jobs-per-user=2").
  std::vector<std::string> coordinator_args;
  // Worker i runs on worker_hosts[i % size]; empty: all on loopback.
  std::vector<WorkerHost> worker_hosts;
  // Extra herd-worker flags of worker i (worker_args[i], e.g. --label
  // pool=a100); none for a worker past its end.
  std::vector<std::vector<std::string>> worker_args;
};

class LocalCluster {
 public:
  explicit LocalCluster(ClusterOptions options = {});
  ~LocalCluster();

  // Absolute path of a herd binary from the test's runfiles.
  static std::string Binary(const std::string& package_path);
  // A loopback port nobody listens on right now.
  static int FreeLocalPort();

  void StartCoordinator();
  // Starts worker `index` (a new one past the initial count adds a worker).
  void StartWorker(int index);
  Process& coordinator() { return *coordinator_; }
  Process& worker(int index) { return *workers_.at(index); }
  void StopCoordinator(int signal);

  const std::string& root() const { return root_; }
  const std::string& address() const { return address_; }
  // What workers and the CLI are given as --coordinator.
  const std::string& coordinator_addresses() const {
    return options_.coordinator_addresses.empty() ? address_ : options_.coordinator_addresses;
  }
  // With auth: the auth file and every principal's token file. Herd() runs
  // the CLI as user "alice"; workers (and so trainers) use the worker token.
  const TestCredentials& credentials() const { return credentials_; }
  // Ids repeat across the clusters of tests that run in parallel: find a
  // cluster's trainers by its work dirs (TrainerPids(cluster, i)).
  std::string worker_id(int index) const { return "worker-" + std::to_string(index); }
  std::string worker_dir(int index) const;
  std::string job_dir(int worker_index, const std::string& job_id) const;
  std::string coordinator_metrics_address() const;
  // The coordinator's --state-dir (its database: state_dir() + "/coordinator.db").
  std::string state_dir() const { return options_.state_dir.empty() ? root_ + "/state" : options_.state_dir; }
  // Shared by every worker's trainers (HERD_CHECKPOINT_ROOT).
  std::string checkpoint_root() const {
    return options_.checkpoint_root.empty() ? root_ + "/checkpoints" : options_.checkpoint_root;
  }

  // Runs `herd ARGS...` against this cluster (address and user alice's token added).
  CommandResult Herd(std::vector<std::string> args, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // The same with another token file (another principal).
  CommandResult HerdAs(const std::string& token_file, std::vector<std::string> args,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // `herd ARGS... -o json`, parsed; fails the test on a non-zero exit.
  nlohmann::json HerdJson(std::vector<std::string> args);
  // Writes `yaml` to a file and submits it; returns the job id.
  std::string Submit(const std::string& yaml);
  // Polls `herd status` until the job's state is one of `states`.
  nlohmann::json WaitForState(const std::string& job_id, const std::set<std::string>& states,
                              std::chrono::milliseconds timeout);
  // Polls `herd workers` until `count` workers are IDLE or BUSY.
  bool WaitForAliveWorkers(int count, std::chrono::milliseconds timeout);
  // All logs, for failure messages.
  std::string Logs() const;

 private:
  ClusterOptions options_;
  std::string root_;
  std::string address_;
  TestCredentials credentials_;
  std::unique_ptr<Process> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
  int submitted_ = 0;
};

}  // namespace herd::testing
