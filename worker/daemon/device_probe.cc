#include "worker/daemon/device_probe.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace herd::worker {

absl::StatusOr<int> ProbeCudaDevices(const std::string& trainer_binary) {
  const std::string command = absl::StrCat("'", trainer_binary, "' ", kProbeDevicesFlag, " 2>&1");
  if (trainer_binary.find('\'') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--trainer-binary: quote in path ", trainer_binary));
  }
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("could not run ", command));
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  absl::string_view rest = output;
  int count = -1;
  const bool parsed = absl::ConsumePrefix(&rest, "cuda_devices ") &&
                      absl::SimpleAtoi(absl::StripTrailingAsciiWhitespace(rest), &count);
  if (status != 0 || !parsed) {
    return absl::FailedPreconditionError(absl::StrCat(trainer_binary, " ", kProbeDevicesFlag, " did not answer (exit ",
                                                      WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                                      "): ", output.substr(0, 500)));
  }
  return count;
}

absl::Status CheckOfferedGpus(const std::string& device, const std::vector<int>& gpus, int visible,
                              const std::string& trainer_binary) {
  if (device != "cuda") return absl::OkStatus();
  if (visible <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda: the trainer (", trainer_binary,
        ") sees no GPU: this machine has none, its driver is not loaded, or the trainer was built against a "
        "CPU-only LibTorch (see worker/comm/README.md)"));
  }
  for (int gpu : gpus) {
    if (gpu >= visible) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: GPU ", gpu, " does not exist (the trainer sees ", visible, ": 0..", visible - 1, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace herd::worker
