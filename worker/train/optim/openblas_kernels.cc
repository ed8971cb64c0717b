#include "worker/train/optim/openblas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace herd {
namespace {

constexpr char kCoreTypeEnv[] = "OPENBLAS_CORETYPE";
// Set with OPENBLAS_CORETYPE by the re-exec: what OpenBLAS chose on its own.
constexpr char kDetectedEnv[] = "HERD_OPENBLAS_DETECTED";

// OpenBLAS's names (openblas_get_corename) for x86 cores without AVX.
bool WithoutAvx(absl::string_view core) {
  static const char* const kCores[] = {"prescott", "core2",   "penryn",  "dunnington", "nehalem",
                                       "atom",     "katmai",  "coppermine", "northwood", "banias",
                                       "opteron",  "opteron_sse3", "barcelona", "bobcat", "nano"};
  const std::string lower = absl::AsciiStrToLower(std::string(core));
  for (const char* name : kCores) {
    if (lower == name) return true;
  }
  return false;
}

const char* EnvOrNull(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

std::string ReadCpuInfo() {
  std::ifstream in("/proc/cpuinfo");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::set<std::string> CpuFlags(absl::string_view cpuinfo) {
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n')) {
    if (!absl::StartsWith(line, "flags")) continue;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    std::set<std::string> flags;
    for (absl::string_view flag : absl::StrSplit(line.substr(colon + 1), ' ', absl::SkipWhitespace())) {
      flags.emplace(absl::StripAsciiWhitespace(flag));
    }
    return flags;
  }
  return {};
}

std::optional<std::string> BetterOpenBlasCore(absl::string_view detected, const std::set<std::string>& flags) {
  if (!WithoutAvx(detected)) return std::nullopt;
  auto has = [&flags](const char* flag) { return flags.count(flag) > 0; };
  if (has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl")) return "SkylakeX";
  if (has("avx2") && has("fma")) return "Haswell";
  if (has("avx")) return "SandyBridge";
  return std::nullopt;
}

OpenBlasKernels InspectOpenBlasKernels() {
  OpenBlasKernels kernels;
  // Already loaded with LibTorch where it is its BLAS; nothing otherwise.
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return kernels;
  kernels.loaded = core_name();
  // /proc/cpuinfo is read only when OpenBLAS's choice may be replaced.
  if (EnvOrNull(kCoreTypeEnv) == nullptr && WithoutAvx(kernels.loaded)) {
    kernels.better = BetterOpenBlasCore(kernels.loaded, CpuFlags(ReadCpuInfo()));
  }
  return kernels;
}

std::string TrainerOpenBlasCore() {
  if (const char* forced = EnvOrNull(kCoreTypeEnv)) return forced;
  const OpenBlasKernels kernels = InspectOpenBlasKernels();
  return kernels.better.value_or(kernels.loaded);
}

void ReexecWithBetterOpenBlasKernels(char** argv) {
  const OpenBlasKernels kernels = InspectOpenBlasKernels();
  if (!kernels.better.has_value()) return;
  setenv(kCoreTypeEnv, kernels.better->c_str(), 1);
  setenv(kDetectedEnv, kernels.loaded.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Still here: train on the kernels already loaded, and say so.
  const int error = errno;
  unsetenv(kCoreTypeEnv);
  setenv(kDetectedEnv, absl::StrCat(kernels.loaded, " (re-exec failed: ", std::strerror(error), ")").c_str(), 1);
}

std::string DescribeOpenBlasKernels() {
  const OpenBlasKernels kernels = InspectOpenBlasKernels();
  if (kernels.loaded.empty()) return "BLAS: not OpenBLAS (its own kernel choice stands)";
  std::string line = absl::StrCat("OpenBLAS kernels: ", kernels.loaded);
  const char* detected = EnvOrNull(kDetectedEnv);
  const char* forced = EnvOrNull(kCoreTypeEnv);
  if (detected != nullptr && forced != nullptr) {
    absl::StrAppend(&line, " (OpenBLAS took this CPU for ", detected,
                    ", a core without AVX; herd-trainer chose ", forced,
                    " from the CPU's flags; set OPENBLAS_CORETYPE to choose yourself)");
  } else if (detected != nullptr) {
    absl::StrAppend(&line, " (OpenBLAS took this CPU for ", detected, ")");
  } else if (forced != nullptr) {
    absl::StrAppend(&line, " (OPENBLAS_CORETYPE=", forced, ")");
  }
  return line;
}

}  // namespace herd
