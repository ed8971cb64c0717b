#include "worker/train/checkpoint/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

constexpr char kMetadataKey[] = "__metadata__";

// Elements of `shape`, or -1 for a negative dimension or an overflow.
int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || (dim > 0 && count > INT64_MAX / dim)) return -1;
    count *= dim;
  }
  return count;
}

void StoreLittleEndian64(uint64_t value, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t LoadLittleEndian64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return value;
}

absl::Status Corrupt(const std::string& what) { return absl::DataLossError(absl::StrCat("safetensors: ", what)); }

}  // namespace

int SafetensorsElementBytes(absl::string_view dtype) {
  static const std::map<std::string, int, std::less<>> kSizes = {{"BOOL", 1}, {"U8", 1},   {"I8", 1},  {"I16", 2},
                                                                 {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"F32", 4},
                                                                 {"I64", 8},  {"F64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

absl::StatusOr<std::string> EncodeSafetensors(std::vector<SafetensorsTensor> tensors,
                                              const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor& t = tensors[i];
    if (t.name.empty() || t.name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor name '", t.name, "' is not allowed"));
    }
    if (i > 0 && tensors[i - 1].name == t.name) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor name '", t.name, "' is repeated"));
    }
    const int element_bytes = SafetensorsElementBytes(t.dtype);
    if (element_bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", t.name, "' has unknown dtype '", t.dtype, "'"));
    }
    const int64_t count = ElementCount(t.shape);
    if (count < 0 || static_cast<uint64_t>(count) * element_bytes != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", t.name, "' holds ", t.data.size(),
                                                     " bytes, not what its shape and dtype ", t.dtype, " need"));
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string bytes(8, '\0');
  StoreLittleEndian64(json.size(), bytes.data());
  bytes.reserve(8 + json.size() + offset);
  bytes += json;
  for (const SafetensorsTensor& t : tensors) bytes += t.data;
  return bytes;
}

absl::StatusOr<SafetensorsContents> DecodeSafetensors(absl::string_view bytes) {
  if (bytes.size() < 8)
    return Corrupt(absl::StrCat("the file has ", bytes.size(), " bytes, fewer than its 8-byte header length"));
  const uint64_t header_size = LoadLittleEndian64(bytes.data());
  if (header_size > bytes.size() - 8) {
    return Corrupt(absl::StrCat("header length ", header_size, " runs past the file's end (", bytes.size(), " bytes)"));
  }
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return Corrupt("the header is not a JSON object");
  const absl::string_view data = bytes.substr(8 + header_size);
  SafetensorsContents contents;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) return Corrupt("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return Corrupt(absl::StrCat("__metadata__ value of '", key, "' is not a string"));
        contents.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (!entry.is_object() || dtype == entry.end() || shape == entry.end() || offsets == entry.end() ||
        !dtype->is_string() || !shape->is_array() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return Corrupt(absl::StrCat("tensor '", name, "' lacks dtype, shape or two data_offsets"));
    }
    SafetensorsTensor tensor;
    tensor.name = name;
    tensor.dtype = dtype->get<std::string>();
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned()) return Corrupt(absl::StrCat("tensor '", name, "' has a shape that is not sizes"));
      tensor.shape.push_back(dim.get<int64_t>());
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    const int element_bytes = SafetensorsElementBytes(tensor.dtype);
    if (element_bytes == 0) return Corrupt(absl::StrCat("tensor '", name, "' has unknown dtype '", tensor.dtype, "'"));
    const int64_t count = ElementCount(tensor.shape);
    if (begin > end || end > data.size() || count < 0 || end - begin != static_cast<uint64_t>(count) * element_bytes) {
      return Corrupt(absl::StrCat("tensor '", name, "' has data_offsets [", begin, ", ", end,
                                  "] that do not fit its shape or the file's ", data.size(), " data bytes"));
    }
    tensor.data = std::string(data.substr(begin, end - begin));
    spans.emplace_back(begin, end);
    contents.tensors.push_back(std::move(tensor));
  }
  // The tensors tile the data: no gaps, no overlaps, nothing after them.
  std::sort(spans.begin(), spans.end());
  uint64_t expected = 0;
  for (const auto& [begin, end] : spans) {
    if (begin != expected) return Corrupt(absl::StrCat("tensor data has a gap or overlap at byte ", expected));
    expected = end;
  }
  if (expected != data.size()) {
    return Corrupt(absl::StrCat("the tensors cover ", expected, " of the file's ", data.size(), " data bytes"));
  }
  return contents;
}

}  // namespace herd
