#include "worker/train/sync/replicas.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace herd {

torch::Tensor FlattenParameters(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  flat.reserve(params.size());
  for (const auto& p : params) flat.push_back(p.detach().to(torch::kCPU).reshape({-1}));
  return torch::cat(flat).contiguous();
}

absl::Status BroadcastParameters(Communicator* comm, const std::vector<torch::Tensor>& params, int root) {
  if (comm->size() == 1) return absl::OkStatus();
  torch::Tensor flat = FlattenParameters(params);
  absl::Status status = comm->Broadcast(flat.data_ptr(), flat.numel() * sizeof(float), root);
  if (!status.ok()) return status;
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& p : params) {
    const int64_t n = p.numel();
    p.copy_(flat.narrow(0, offset, n).view(p.sizes()));
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status BroadcastBuffers(Communicator* comm, const std::vector<torch::Tensor>& buffers, int root) {
  if (comm->size() == 1 || buffers.empty()) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> bytes;
  for (const auto& b : buffers) {
    bytes.push_back(b.detach().to(torch::kCPU).contiguous().reshape({-1}).view(torch::kUInt8));
  }
  torch::Tensor flat = torch::cat(bytes);
  if (absl::Status status = comm->Broadcast(flat.data_ptr(), flat.numel(), root); !status.ok()) return status;
  int64_t offset = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const int64_t n = bytes[i].numel();
    buffers[i].copy_(flat.narrow(0, offset, n).view(buffers[i].scalar_type()).view(buffers[i].sizes()));
    offset += n;
  }
  return absl::OkStatus();
}

namespace {

// splitmix64's finalizer: a bijection on 64-bit words whose every output bit
// depends on every input bit, so two changed words cannot cancel out the way
// they can in plain FNV over words (two flipped top bits do).
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Folds one tensor's raw bytes into `hash`. Each step, hash = (hash ^
// Mix(word)) * odd, is a bijection of the hash for a fixed word and of the
// word for a fixed hash: a single changed word always changes the result.
uint64_t FoldTensor(uint64_t hash, const torch::Tensor& tensor) {
  torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(cpu.data_ptr());
  const size_t size = cpu.numel() * cpu.element_size();
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    hash = (hash ^ Mix(word)) * 1099511628211ull;
  }
  uint64_t tail = 0;
  if (i < size) std::memcpy(&tail, bytes + i, size - i);
  hash = (hash ^ Mix(tail ^ (static_cast<uint64_t>(size) << 3))) * 1099511628211ull;
  return Mix(hash);
}

constexpr uint64_t kHashSeed = 1469598103934665603ull;

}  // namespace

uint64_t ParameterHash(const std::vector<torch::Tensor>& params) {
  uint64_t hash = kHashSeed;
  for (const auto& p : params) hash = FoldTensor(hash, p);
  return hash;
}

std::vector<uint64_t> TensorHashes(const std::vector<torch::Tensor>& params) {
  std::vector<uint64_t> hashes;
  hashes.reserve(params.size());
  for (const auto& p : params) hashes.push_back(FoldTensor(kHashSeed, p));
  return hashes;
}

absl::Status CheckReplicaHashes(const std::vector<uint64_t>& all, int64_t step) {
  std::vector<int> diverged;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) diverged.push_back(static_cast<int>(r));
  }
  if (diverged.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("replica divergence at step ", step, ": parameters of rank(s) ",
                                          absl::StrJoin(diverged, ","), " differ from rank 0"));
}

absl::Status VerifyReplicasBitwise(Communicator* comm, const std::vector<torch::Tensor>& params) {
  if (comm->size() < 2) return absl::OkStatus();
  const std::vector<uint64_t> mine = TensorHashes(params);
  const size_t count = mine.size();
  std::vector<uint64_t> all(count * comm->size());
  if (count == 0) return absl::OkStatus();
  absl::Status status = comm->AllGather(mine.data(), count * sizeof(uint64_t), all.data());
  if (!status.ok()) return status;
  for (int r = 1; r < comm->size(); ++r) {
    for (size_t t = 0; t < count; ++t) {
      if (all[r * count + t] != all[t]) {
        return absl::InternalError(absl::StrCat("replica check failed: rank ", r, "'s parameter tensor ", t, " (",
                                                params[t].numel(), " values) differs from rank 0's"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace herd
