// The command line a daemon gives each trainer it starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/rpc_options.h"
#include "worker/contract/trainer_args.h"
#include "worker/contract/trainer_contract.h"

namespace herd::worker {

// What every trainer of this daemon shares.
struct TrainerCommand {
  std::string trainer_binary;
  std::string coordinator;
  std::string worker_id;
  std::string device = "cpu";  // cpu, cuda
  std::string token_file;      // empty with insecure_no_auth
  bool insecure_no_auth = false;
  TlsOptions tls;
  // Checkpoint storage shared by all workers of the cluster.
  std::string checkpoint_root;
  std::string data_plane = kTcpDataPlane;  // tcp, gloo (--data-plane)
  std::string congestion_control = "bbr";  // --data-plane-congestion-control
  int data_plane_lanes = kDefaultTcpMeshLanes;  // --data-plane-lanes
};

// argv for one job's trainer (argv[0] is the trainer binary). `gpu` is
// passed only for cuda.
std::vector<std::string> BuildTrainerArgv(const TrainerCommand& command, const std::string& job_id,
                                          const std::string& job_dir, std::optional<int> gpu);


}  // namespace herd::worker
