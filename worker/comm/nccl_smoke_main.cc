// Runs the NCCL communicator's checks (nccl_checks.h) on this machine's GPUs
// and prints one JSON line, for a GPU machine outside CI:
//   bazel run //worker/comm:nccl_smoke -- [--world=N]
// --world=N uses devices 0..N-1 (default 1). Exit status: 0 all passed,
// 1 some failed, 2 could not run (no NCCL in the build, no GPU, bad flag).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "worker/comm/testing/nccl_checks.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/nccl_device.h"

namespace {

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int CannotRun(const std::string& reason) {
  std::printf("{\"ok\":false,\"skipped\":true,\"reason\":%s}\n", JsonString(reason).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int world = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--world=") || !absl::SimpleAtoi(arg.substr(8), &world) || world < 1) {
      return CannotRun(absl::StrCat("bad argument '", arg, "'; usage: nccl_smoke [--world=N]"));
    }
  }
  const std::string reason = herd::NcclChecksUnavailableReason();
  if (!reason.empty()) return CannotRun(reason);
  const int devices = herd::CudaDeviceCount().value_or(0);
  if (world > devices) return CannotRun(absl::StrCat("--world=", world, " needs ", world, " GPUs; ", devices, " visible"));

  bool all_ok = true;
  std::string checks;
  for (const herd::NcclCheck& check : herd::AllNcclChecks(world)) {
    std::fprintf(stderr, "nccl_smoke: %s ...\n", check.name.c_str());
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = check.run();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "nccl_smoke: %s %s (%lld ms)\n", check.name.c_str(), status.ok() ? "ok" : "FAILED",
                 static_cast<long long>(ms));
    all_ok = all_ok && status.ok();
    absl::StrAppend(&checks, checks.empty() ? "" : ",", "{\"name\":", JsonString(check.name),
                    ",\"ok\":", status.ok() ? "true" : "false", ",\"ms\":", ms);
    if (!status.ok()) absl::StrAppend(&checks, ",\"error\":", JsonString(status.ToString()));
    absl::StrAppend(&checks, "}");
  }
  std::printf("{\"ok\":%s,\"world\":%d,\"device\":%s,\"nccl_version\":%d,\"checks\":[%s]}\n", all_ok ? "true" : "false",
              world, JsonString(herd::CudaDeviceName(0).value_or("?")).c_str(),
              herd::NcclRuntimeVersion().value_or(0), checks.c_str());
  return all_ok ? 0 : 1;
}
