// bf16 autocast on CUDA for the forward pass (job spec `bf16_autocast`):
// matmuls and convolutions run in bfloat16, parameters and gradients stay
// float32. Scoped: enabled for the guard's lifetime only.
#pragma once

namespace herd {

class CudaBf16Autocast {
 public:
  explicit CudaBf16Autocast(bool enabled);
  ~CudaBf16Autocast();
  CudaBf16Autocast(const CudaBf16Autocast&) = delete;
  CudaBf16Autocast& operator=(const CudaBf16Autocast&) = delete;

 private:
  bool enabled_;
};

}  // namespace herd
