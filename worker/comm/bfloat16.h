// bfloat16 <-> float conversion and the elementwise sum Gloo uses to reduce
// bf16 buffers (Gloo has no bf16 type of its own). Values travel as raw
// uint16 bit patterns: the top half of an IEEE float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace herd {

inline float BFloat16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

// Round-to-nearest-even, as PyTorch and the hardware do; NaN stays NaN.
inline uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // quiet NaN
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

// out[i] = bf16(float(a[i]) + float(b[i])); out may alias a or b. The
// signature is Gloo's reduce-function signature.
void SumBFloat16(void* out, const void* a, const void* b, size_t count);

}  // namespace herd
