#include "worker/data/testing/npy_test_files.h"

#include <fstream>
#include <stdexcept>

namespace herd {

std::string NpyBytes(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data,
                     int version, bool fortran_order) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (3, 4); a 1-tuple keeps its comma: (5,)
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran_order ? "True" : "False") +
                       ", 'shape': (" + dims + "), }";
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += static_cast<char>(version);
  bytes += '\0';
  const size_t length = header.size();
  bytes += static_cast<char>(length & 0xff);
  bytes += static_cast<char>((length >> 8) & 0xff);
  if (version != 1) {
    bytes += static_cast<char>((length >> 16) & 0xff);
    bytes += static_cast<char>((length >> 24) & 0xff);
  }
  return bytes + header + data;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace herd
