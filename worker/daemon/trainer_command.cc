#include "worker/daemon/trainer_command.h"

#include "worker/contract/trainer_args.h"

namespace herd::worker {

std::vector<std::string> BuildTrainerArgv(const TrainerCommand& command, const std::string& job_id,
                                          const std::string& job_dir, std::optional<int> gpu) {
  TrainerArgs args;
  args.coordinator = command.coordinator;
  args.job = job_id;
  args.worker_id = command.worker_id;
  args.work_dir = job_dir;
  args.device = command.device;
  if (command.device == "cuda" && gpu.has_value()) args.gpu = *gpu;
  args.token_file = command.token_file;
  args.insecure_no_auth = command.insecure_no_auth;
  args.tls_ca = command.tls.ca_file;
  args.tls_cert = command.tls.cert_file;
  args.tls_key = command.tls.key_file;
  args.termination_message_file = TerminationMessagePath(job_dir);
  args.alive_file = TrainerAlivePath(job_dir);
  args.checkpoint_root = command.checkpoint_root;
  args.data_plane = command.data_plane;
  args.congestion_control = command.congestion_control;
  args.data_plane_lanes = command.data_plane_lanes;
  std::vector<std::string> argv = {command.trainer_binary};
  for (std::string& flag : ToArgv(args)) argv.push_back(std::move(flag));
  return argv;
}

}  // namespace herd::worker
