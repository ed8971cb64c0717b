#include "worker/train/generation/healing.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace herd {
namespace {

void PutU64(std::string* out, uint64_t value) {
  char bytes[8];
  std::memcpy(bytes, &value, 8);
  out->append(bytes, 8);
}

bool GetU64(const std::string& in, size_t* offset, uint64_t* value) {
  if (in.size() - *offset < 8) return false;
  std::memcpy(value, in.data() + *offset, 8);
  *offset += 8;
  return true;
}

bool GetString(const std::string& in, size_t* offset, std::string* value) {
  uint64_t size = 0;
  if (!GetU64(in, offset, &size) || in.size() - *offset < size) return false;
  value->assign(in.data() + *offset, size);
  *offset += size;
  return true;
}

}  // namespace

std::string EncodeFiles(const std::map<std::string, std::string>& files) {
  std::string out;
  PutU64(&out, files.size());
  for (const auto& [name, data] : files) {
    PutU64(&out, name.size());
    out += name;
    PutU64(&out, data.size());
    out += data;
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> DecodeFiles(const std::string& bytes) {
  size_t offset = 0;
  uint64_t count = 0;
  if (!GetU64(bytes, &offset, &count)) return absl::InvalidArgumentError("state bytes: truncated header");
  std::map<std::string, std::string> files;
  for (uint64_t i = 0; i < count; ++i) {
    std::string name, data;
    if (!GetString(bytes, &offset, &name) || !GetString(bytes, &offset, &data)) {
      return absl::InvalidArgumentError(absl::StrCat("state bytes: truncated at file ", i, " of ", count));
    }
    files[name] = std::move(data);
  }
  if (offset != bytes.size()) return absl::InvalidArgumentError("state bytes: trailing data");
  return files;
}

absl::StatusOr<HealSource> ChooseHealSource(Communicator* comm, int64_t generation, int64_t step) {
  const int64_t have[2] = {generation, generation >= 0 ? step : -1};
  std::vector<int64_t> all(2 * static_cast<size_t>(comm->size()));
  if (auto s = comm->AllGather(have, sizeof(have), all.data()); !s.ok()) return s;
  int source = -1;
  for (int r = 0; r < comm->size(); ++r) {
    const int64_t generation = all[2 * r], step = all[2 * r + 1];
    if (generation < 0) continue;
    if (source < 0 || generation > all[2 * source] ||
        (generation == all[2 * source] && step > all[2 * source + 1])) {
      source = r;
    }
  }
  if (source < 0) return HealSource{};
  HealSource chosen{source, all[2 * source], all[2 * source + 1], true};
  for (int r = 0; r < comm->size(); ++r) {
    if (all[2 * r] != chosen.generation || all[2 * r + 1] != chosen.step) chosen.held_by_all = false;
  }
  return chosen;
}

absl::Status CheckHealBytes(const std::string& bytes, const std::string& sha256_hex, int source) {
  const std::string got = Sha256Hex(bytes);
  if (got == sha256_hex) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("heal transfer from rank ", source, ": ", bytes.size(),
                                             " bytes with SHA-256 ", got, ", the source sent ", sha256_hex,
                                             " (corrupted in transit)"));
}

absl::Status BroadcastFiles(Communicator* comm, int source, std::map<std::string, std::string>* files) {
  std::string bytes;
  // The header: the payload's size and its SHA-256 (64 hex digits).
  struct Header {
    uint64_t size = 0;
    char sha256[64] = {};
  } header;
  if (comm->rank() == source) {
    bytes = EncodeFiles(*files);
    header.size = bytes.size();
    const std::string digest = Sha256Hex(bytes);
    std::memcpy(header.sha256, digest.data(), sizeof(header.sha256));
  }
  if (auto s = comm->Broadcast(&header, sizeof(header), source); !s.ok()) return s;
  bytes.resize(header.size);
  if (auto s = comm->Broadcast(bytes.data(), header.size, source); !s.ok()) return s;
  if (comm->rank() == source) return absl::OkStatus();
  if (auto s = CheckHealBytes(bytes, std::string(header.sha256, sizeof(header.sha256)), source); !s.ok()) return s;
  auto decoded = DecodeFiles(bytes);
  if (!decoded.ok()) return decoded.status();
  *files = std::move(*decoded);
  return absl::OkStatus();
}

}  // namespace herd
