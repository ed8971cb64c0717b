// IEEE float16 <-> float conversion and the elementwise sum the TCP
// mesh reduces float16 buffers with (tcp_mesh_communicator.h). Values
// travel as raw uint16 bit patterns. The sum is what Gloo's float16 sum
// does: widen to float, add, round back to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace herd {

inline float Float16ToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &value, sizeof(bits));
    bits |= sign;
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN (payload kept)
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Round-to-nearest-even; overflow gives inf, NaN stays NaN (quiet).
inline uint16_t FloatToFloat16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint32_t half;
  if (f >= 0x47800000u) {  // >= 65536 (or inf/NaN): inf, or a quiet NaN
    half = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (f < 0x38800000u) {  // below the smallest normal half: subnormal or 0
    // Adding 0.5 puts the half's subnormal ulp (2^-24) at the float's last
    // mantissa bit, so the float adder rounds to nearest even for us.
    float shifted;
    std::memcpy(&shifted, &f, sizeof(shifted));
    shifted += 0.5f;
    std::memcpy(&half, &shifted, sizeof(half));
    half -= 0x3f000000u;
  } else {
    const uint32_t odd = (f >> 13) & 1u;
    f += 0xc8000000u + 0xfffu + odd;  // rebias the exponent (127 -> 15), round half to even
    half = f >> 13;  // a carry out of the mantissa may give inf: right
  }
  return static_cast<uint16_t>(half | (sign >> 16));
}

// out[i] = f16(float(a[i]) + float(b[i])); out may alias a or b.
void SumFloat16(void* out, const void* a, const void* b, size_t count);

}  // namespace herd
