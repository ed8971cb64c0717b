// The header of a NumPy .npy file (format versions 1, 2 and 3), parsed from
// the file's first bytes without Python: the dtype, the shape and where the
// array's bytes start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd {

struct NpyHeader {
  std::string descr;           // as written, e.g. "<f4", "|u1"
  std::vector<int64_t> shape;  // () is a scalar
  int64_t data_offset = 0;     // bytes before the array's data
  int item_bytes = 0;          // from descr
  int64_t element_count() const;
};

// Parses the header at the start of `bytes` (the whole file or its first
// part, `size` bytes). Refused with what is wrong: not starting with the
// .npy magic, an unknown version, a malformed header dictionary, a
// fortran_order array, a big-endian or non-numeric descr, a negative
// dimension. Does not check the data's length (NpyDataBytes does).
absl::StatusOr<NpyHeader> ParseNpyHeader(const uint8_t* bytes, int64_t size);

}  // namespace herd
