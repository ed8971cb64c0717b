#include "worker/data/idx_reader.h"

#include <zlib.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace herd {
namespace {

constexpr uint8_t kUnsignedByteType = 0x08;
// No real data set comes near this; it keeps dimension products from overflowing.
constexpr int64_t kMaxElements = int64_t{1} << 40;

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& file) {
  gzFile in = gzopen(file.c_str(), "rb");
  if (in == nullptr) return absl::NotFoundError(absl::StrCat(file, ": cannot open"));
  gzbuffer(in, 1 << 20);
  std::vector<uint8_t> bytes;
  constexpr unsigned kChunk = 1 << 20;
  for (;;) {
    const size_t old_size = bytes.size();
    bytes.resize(old_size + kChunk);
    const int got = gzread(in, bytes.data() + old_size, kChunk);
    if (got < 0) {
      int code = 0;
      const std::string reason = gzerror(in, &code);
      gzclose(in);
      return absl::DataLossError(absl::StrCat(file, ": truncated or corrupt: ", reason));
    }
    bytes.resize(old_size + got);
    if (got == 0) break;
  }
  // A gzip stream cut short reads as a clean end of data; gzclose reports it.
  const int close_code = gzclose(in);
  if (close_code == Z_BUF_ERROR) {
    return absl::DataLossError(absl::StrCat(file, ": truncated gzip stream"));
  }
  if (close_code != Z_OK) return absl::DataLossError(absl::StrCat(file, ": cannot read (zlib error ", close_code, ")"));
  return bytes;
}

}  // namespace

int64_t IdxArray::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& file, int expected_dims) {
  absl::StatusOr<std::vector<uint8_t>> bytes = ReadWholeFile(file);
  if (!bytes.ok()) return bytes.status();
  IdxArray array;
  array.bytes = std::move(*bytes);
  const size_t size = array.bytes.size();
  if (size < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": truncated: expected at least 4 bytes of IDX header, got ", size));
  }
  const uint32_t magic = ReadBigEndian32(array.bytes.data());
  const uint32_t type = (magic >> 8) & 0xff;
  const int dims = static_cast<int>(magic & 0xff);
  if ((magic >> 16) != 0 || type != kUnsignedByteType || dims != expected_dims) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad IDX magic 0x%08x (expected 0x%08x: unsigned bytes, %d dimensions)", file, magic,
        (uint32_t{kUnsignedByteType} << 8) | static_cast<uint32_t>(expected_dims), expected_dims));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(dims);
  if (size < header) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": truncated: expected ", header, " bytes of IDX header, got ", size));
  }
  int64_t elements = 1;
  for (int i = 0; i < dims; ++i) {
    const int64_t dim = ReadBigEndian32(array.bytes.data() + 4 + 4 * i);
    array.dims.push_back(dim);
    elements = dim == 0 ? 0 : elements * dim;
    if (elements > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": implausible IDX dimensions"));
    }
  }
  array.data_offset = header;
  const uint64_t expected = header + static_cast<uint64_t>(elements);
  if (size < expected) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": truncated: expected ", expected, " bytes, got ", size));
  }
  if (size > expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": size mismatch: expected ", expected, " bytes, got ", size, " (trailing data)"));
  }
  return array;
}

}  // namespace herd
