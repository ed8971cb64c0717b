// sync.compression int8 for parameter averaging: 8 bits per element on the
// wire, summed exactly by an ordinary uint8 all-reduce.
//
// Every rank first learns a per-chunk scale shared by all ranks (the largest
// |value| of that chunk on any rank, from a small all-gather). Each rank then
// codes value/scale in [-1, 1] as an integer in [0, levels] with levels
// the even number at most 255 / world (zero has a code), so the sum of all ranks' codes never exceeds 255 and
// the uint8 all-reduce is exact: every rank decodes the same mean bitwise.
// What rounding loses is the caller's residual, added to the next round's
// values (error feedback), so it is delayed rather than lost.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace herd {

// Elements that share one scale.
inline constexpr int64_t kInt8ChunkElements = 4096;

int64_t Int8Chunks(int64_t elements);
// Code values per rank for `world` ranks; 0 when world > 127 (fewer than 3 levels).
int Int8Levels(int world);
// Largest |v| per chunk, float32 [Int8Chunks(v.numel())].
torch::Tensor ChunkAbsMax(const torch::Tensor& v);
// Codes `v` with the shared per-chunk `scale` into `codes` (uint8, same
// length) and writes what the codes stand for into `decoded` (float32), so
// the caller's residual is v - decoded.
void Int8Encode(const torch::Tensor& v, const torch::Tensor& scale, int levels, torch::Tensor& codes,
                torch::Tensor& decoded);
// The mean over `world` ranks of what they coded, from the sum of their codes.
void Int8DecodeMean(const torch::Tensor& code_sum, const torch::Tensor& scale, int levels, int world,
                    torch::Tensor& mean);

}  // namespace herd
