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

uint64_t ParameterHash(const std::vector<torch::Tensor>& params) {
  uint64_t hash = 1469598103934665603ull;
  for (const auto& p : params) {
    torch::Tensor cpu = p.detach().to(torch::kCPU).contiguous();
    // Hash 8 bytes at a time: FNV over words is cheap and still sensitive to
    // any changed bit, which is all a replica check needs.
    const auto* bytes = static_cast<const unsigned char*>(cpu.data_ptr());
    const size_t size = cpu.numel() * cpu.element_size();
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      hash = (hash ^ word) * 1099511628211ull;
    }
    for (; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  return hash;
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
  torch::Tensor flat = FlattenParameters(params);
  const size_t bytes = flat.numel() * sizeof(float);
  std::vector<unsigned char> all(bytes * comm->size());
  absl::Status status = comm->AllGather(flat.data_ptr(), bytes, all.data());
  if (!status.ok()) return status;
  for (int r = 1; r < comm->size(); ++r) {
    if (std::memcmp(all.data(), all.data() + r * bytes, bytes) != 0) {
      return absl::InternalError(absl::StrCat("replica check failed: rank ", r, "'s parameters differ from rank 0's"));
    }
  }
  return absl::OkStatus();
}

}  // namespace herd
