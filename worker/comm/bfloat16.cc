#include "worker/comm/bfloat16.h"

namespace herd {

void SumBFloat16(void* out, const void* a, const void* b, size_t count) {
  auto* dst = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < count; ++i) {
    dst[i] = FloatToBFloat16(BFloat16ToFloat(x[i]) + BFloat16ToFloat(y[i]));
  }
}

}  // namespace herd
