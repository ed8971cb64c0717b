#include "worker/comm/float_sum.h"

#include <cstring>

namespace herd {

void SumFloat32(void* c, const void* a, const void* b, size_t n) {
  using Lanes = float __attribute__((vector_size(64)));
  constexpr size_t kLanes = sizeof(Lanes) / sizeof(float);
  auto* out = static_cast<char*>(c);
  const auto* x = static_cast<const char*>(a);
  const auto* y = static_cast<const char*>(b);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes u, v;
    std::memcpy(&u, x + i * sizeof(float), sizeof(Lanes));
    std::memcpy(&v, y + i * sizeof(float), sizeof(Lanes));
    u += v;
    std::memcpy(out + i * sizeof(float), &u, sizeof(Lanes));
  }
  for (; i < n; ++i) {
    float u, v;
    std::memcpy(&u, x + i * sizeof(float), sizeof(float));
    std::memcpy(&v, y + i * sizeof(float), sizeof(float));
    u += v;
    std::memcpy(out + i * sizeof(float), &u, sizeof(float));
  }
}

}  // namespace herd
