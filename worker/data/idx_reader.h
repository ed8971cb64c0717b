// Reads IDX files (the MNIST family's format: big-endian magic 0x0000TTNN
// with type TT and NN dimensions, then NN uint32 sizes, then the data),
// gzip-compressed or raw. Only unsigned-byte data (type 0x08), which is what
// image/label sets use. No LibTorch, so it compiles and tests fast.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> bytes;  // the whole file; data starts at data_offset
  size_t data_offset = 0;

  const uint8_t* data() const { return bytes.data() + data_offset; }
  int64_t num_elements() const;
};

// Reads `file` (gzip or raw: zlib reads both) and checks that it is a ubyte
// IDX file with `expected_dims` dimensions whose size matches its header.
// Errors start with "<file>: ".
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& file, int expected_dims);

}  // namespace herd
