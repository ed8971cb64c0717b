#include "worker/daemon/trainer_command.h"

#include "absl/strings/str_cat.h"

namespace herd::worker {

std::vector<std::string> BuildTrainerArgv(const TrainerCommand& command, const std::string& job_id,
                                          const std::string& job_dir, std::optional<int> gpu) {
  std::vector<std::string> argv = {
      command.trainer_binary,
      absl::StrCat("--coordinator=", command.coordinator),
      absl::StrCat("--job=", job_id),
      absl::StrCat("--worker-id=", command.worker_id),
      absl::StrCat("--work-dir=", job_dir),
      absl::StrCat("--device=", command.device),
  };
  if (command.device == "cuda" && gpu.has_value()) argv.push_back(absl::StrCat("--gpu=", *gpu));
  if (command.insecure_no_auth) {
    argv.push_back("--insecure-no-auth");
  } else {
    argv.push_back(absl::StrCat("--token-file=", command.token_file));
  }
  if (!command.tls.ca_file.empty()) argv.push_back(absl::StrCat("--tls-ca=", command.tls.ca_file));
  if (!command.tls.cert_file.empty()) argv.push_back(absl::StrCat("--tls-cert=", command.tls.cert_file));
  if (!command.tls.key_file.empty()) argv.push_back(absl::StrCat("--tls-key=", command.tls.key_file));
  argv.push_back(absl::StrCat("--termination-message-file=", TerminationMessagePath(job_dir)));
  argv.push_back(absl::StrCat("--alive-file=", TrainerAlivePath(job_dir)));
  if (!command.checkpoint_root.empty()) argv.push_back(absl::StrCat("--checkpoint-root=", command.checkpoint_root));
  return argv;
}

}  // namespace herd::worker
