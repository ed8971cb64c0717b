#include "worker/comm/communicator.h"

#include <algorithm>

namespace herd {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kUInt8:
      return 1;
  }
  return 0;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt64:
      return "int64";
    case DataType::kUInt8:
      return "uint8";
  }
  return "unknown";
}

size_t ReduceScatterBlockCount(size_t count, int size) {
  return size < 1 ? count : (count + static_cast<size_t>(size) - 1) / static_cast<size_t>(size);
}

RangeLayout NearEqualRanges(size_t count, int size) {
  const size_t n = static_cast<size_t>(std::max(size, 1));
  RangeLayout layout(n);
  for (size_t r = 0; r < n; ++r) layout[r].push_back(ElementRange{count * r / n, count * (r + 1) / n});
  return layout;
}

absl::Status GenerationStillOn(RendezvousStore& store, const std::string& key) {
  std::string ignored;
  return store.Get(key, std::chrono::milliseconds(0), &ignored);
}

}  // namespace herd
