// The safetensors format (what Hugging Face tools read), written from its
// specification: an 8-byte little-endian header length N, N bytes of JSON
// ({"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [BEGIN, END]},
// optional "__metadata__": {string: string}}) padded with spaces to a
// multiple of 8, then the tensors' raw little-endian bytes, offsets counted
// from the end of the header. Pure bytes: no LibTorch here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;
  std::string data;  // row-major, little-endian
};

struct SafetensorsContents {
  std::vector<SafetensorsTensor> tensors;  // by name
  std::map<std::string, std::string> metadata;
};

// Bytes of one element of `dtype`; 0 for a dtype the format does not have.
int SafetensorsElementBytes(absl::string_view dtype);

// The file's bytes. Tensors are laid out in name order, so equal contents
// give equal files. INVALID_ARGUMENT naming the tensor for an unknown dtype,
// a size that does not match its shape, or an empty or repeated name.
absl::StatusOr<std::string> EncodeSafetensors(std::vector<SafetensorsTensor> tensors,
                                              const std::map<std::string, std::string>& metadata = {});

// Parses and checks a whole file (header length, JSON, dtypes, every
// tensor's offsets against its shape, tensors covering the data exactly);
// DATA_LOSS naming what is wrong.
absl::StatusOr<SafetensorsContents> DecodeSafetensors(absl::string_view bytes);

}  // namespace herd
