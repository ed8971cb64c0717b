#include "worker/comm/float16.h"

namespace herd {

void SumFloat16(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<char*>(out);
  const auto* x = static_cast<const char*>(a);
  const auto* y = static_cast<const char*>(b);
  for (size_t i = 0; i < count; ++i) {
    uint16_t p, q;
    std::memcpy(&p, x + 2 * i, 2);
    std::memcpy(&q, y + 2 * i, 2);
    const uint16_t sum = FloatToFloat16(Float16ToFloat(p) + Float16ToFloat(q));
    std::memcpy(o + 2 * i, &sum, 2);
  }
}

}  // namespace herd
