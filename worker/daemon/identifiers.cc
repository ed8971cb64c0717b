#include "worker/daemon/identifiers.h"

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace herd::worker {
namespace {

bool IsWorkerIdChar(char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-'; }

}  // namespace

bool IsValidJobId(absl::string_view job_id) {
  if (job_id.empty() || job_id.size() > 64) return false;
  for (char c : job_id) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) return false;
  }
  return true;
}

bool IsValidWorkerId(absl::string_view worker_id) {
  if (worker_id.empty() || worker_id.size() > 128) return false;
  for (char c : worker_id) {
    if (!IsWorkerIdChar(c)) return false;
  }
  return true;
}

std::string DefaultWorkerId(absl::string_view host_name, absl::string_view work_dir) {
  while (work_dir.size() > 1 && work_dir.back() == '/') work_dir.remove_suffix(1);
  absl::string_view dir_name = work_dir.substr(work_dir.rfind('/') + 1);
  std::string id = absl::StrCat(host_name.empty() ? "worker" : host_name, "-", dir_name);
  if (dir_name.empty()) id = std::string(host_name.empty() ? "worker" : host_name);
  for (char& c : id) {
    if (!IsWorkerIdChar(c)) c = '-';
  }
  if (id.size() > 128) id.resize(128);
  return id;
}

std::string NewIncarnation() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device entropy;
  std::mt19937_64 random((static_cast<uint64_t>(entropy()) << 32) ^ entropy());
  std::string incarnation(16, '0');
  for (char& c : incarnation) c = kHex[random() % 16];
  return incarnation;
}

bool IsValidIncarnation(absl::string_view incarnation) {
  if (incarnation.size() != 16) return false;
  for (char c : incarnation) {
    if (!(absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace herd::worker
