// Writes small .npy and token files for tests, byte for byte as NumPy's
// np.save and nanoGPT's tokens.tofile() do.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace herd {

// A .npy file: magic, `version` (1: 2-byte header length, 2 and 3: 4-byte),
// the header dictionary padded to 64 bytes, then `data` as given.
std::string NpyBytes(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data,
                     int version = 1, bool fortran_order = false);

// The raw bytes of `values`, in this (little-endian) machine's order.
template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

void WriteFile(const std::string& path, const std::string& bytes);

}  // namespace herd
