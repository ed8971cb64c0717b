#include "worker/train/sync/int8_wire.h"

namespace herd {
namespace {

// The per-chunk scale stretched to one value per element.
torch::Tensor PerElement(const torch::Tensor& scale, int64_t elements) {
  return scale.repeat_interleave(kInt8ChunkElements).narrow(0, 0, elements);
}

}  // namespace

int64_t Int8Chunks(int64_t elements) { return (elements + kInt8ChunkElements - 1) / kInt8ChunkElements; }

int Int8Levels(int world) {
  // Even, so that zero (most of a quiet chunk) is a code of its own.
  const int levels = (255 / world) & ~1;
  return levels >= 2 ? levels : 0;
}

torch::Tensor ChunkAbsMax(const torch::Tensor& v) {
  const int64_t n = v.numel();
  const int64_t chunks = Int8Chunks(n);
  auto padded = torch::zeros({chunks * kInt8ChunkElements}, v.options());
  padded.narrow(0, 0, n).copy_(v.reshape({-1}));
  return std::get<0>(padded.abs().view({chunks, kInt8ChunkElements}).max(1));
}

void Int8Encode(const torch::Tensor& v, const torch::Tensor& scale, int levels, torch::Tensor& codes,
                torch::Tensor& decoded) {
  torch::NoGradGuard no_grad;
  const auto s = PerElement(scale, v.numel());
  // A chunk that is zero on every rank has scale 0: any divisor works, 1 keeps it finite.
  const auto divisor = torch::where(s > 0, s, torch::ones_like(s));
  const double half = levels / 2.0;
  auto q = ((v / divisor + 1) * half).round_().clamp_(0, levels);
  codes.copy_(q);
  decoded.copy_((q / half - 1) * s);
}

void Int8DecodeMean(const torch::Tensor& code_sum, const torch::Tensor& scale, int levels, int world,
                    torch::Tensor& mean) {
  torch::NoGradGuard no_grad;
  const auto s = PerElement(scale, mean.numel());
  // Sum of (q_r / half - 1) * s over ranks = (sum q / half - world) * s.
  mean.copy_((code_sum.to(torch::kFloat) / (levels / 2.0) - world) * s / world);
}

}  // namespace herd
