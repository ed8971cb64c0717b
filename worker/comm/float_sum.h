// Elementwise float32 sum shared by the all-reduce backends on CPU.
#pragma once

#include <cstddef>

namespace herd {

// c = a + b for float32, 16 lanes at a time. gloo::sum<float> counts with an
// int and lets c alias a, so GCC keeps it scalar at -O2; the reduction was
// ~14% of a large all-reduce's CPU (perf, bench/README.md). Loads and stores
// go through memcpy: Gloo's segment offsets promise no vector alignment.
// Exact aliasing c == a (Gloo reduces in place) is fine lane by lane.
// `n` counts floats; c may be exactly a.
void SumFloat32(void* c, const void* a, const void* b, size_t n);

}  // namespace herd
