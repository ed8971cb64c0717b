#include "worker/train/sync/sync_buckets.h"

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

int64_t Floats(double mib) { return static_cast<int64_t>(mib * kMiB / sizeof(float)); }

}  // namespace

BucketLayout PlanBuckets(const std::vector<torch::Tensor>& params, double first_bucket_mib, double bucket_cap_mib,
                         bool only_requiring_grad) {
  BucketLayout layout;
  layout.slots.resize(params.size());
  int64_t cap = Floats(first_bucket_mib);
  int64_t used = 0;
  bool open = false;
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    if (only_requiring_grad && !params[i].requires_grad()) continue;
    const int64_t numel = params[i].numel();
    if (!open) {
      layout.buckets.emplace_back();
      layout.elements.push_back(0);
      used = 0;
      open = true;
    }
    layout.slots[i] = BucketSlot{static_cast<int>(layout.buckets.size()) - 1, used, numel};
    layout.buckets.back().push_back(i);
    used += numel;
    layout.elements.back() = used;
    if (used >= cap) {
      open = false;
      cap = Floats(bucket_cap_mib);
    }
  }
  return layout;
}

torch::ScalarType TorchType(DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return torch::kHalf;
    case DataType::kBFloat16:
      return torch::kBFloat16;
    case DataType::kUInt8:
      return torch::kByte;  // int8 averaging's codes
    default:
      return torch::kFloat;
  }
}

}  // namespace herd
