#include "worker/train/checkpoint/final_model.h"

#include <torch/serialize/archive.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/sha256.h"
#include "worker/train/checkpoint/safetensors.h"

// safetensors stores little-endian bytes; the tensors' memory is copied as is.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors output assumes a little-endian host");

namespace herd {
namespace {

const char* SafetensorsDtype(c10::ScalarType type) {
  switch (type) {
    case torch::kFloat: return "F32";
    case torch::kHalf: return "F16";
    case torch::kBFloat16: return "BF16";
    case torch::kDouble: return "F64";
    case torch::kLong: return "I64";
    case torch::kInt: return "I32";
    case torch::kShort: return "I16";
    case torch::kChar: return "I8";
    case torch::kByte: return "U8";
    case torch::kBool: return "BOOL";
    default: return nullptr;
  }
}

v1::ModelFile Describe(const std::string& name, const std::string& bytes) {
  v1::ModelFile file;
  file.set_name(name);
  file.set_size_bytes(static_cast<int64_t>(bytes.size()));
  file.set_sha256(Sha256Hex(bytes));
  return file;
}

}  // namespace

absl::StatusOr<std::string> SafetensorsOf(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensor> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const char* dtype = SafetensorsDtype(t.scalar_type());
    if (dtype == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has dtype ", c10::toString(t.scalar_type()), ", which safetensors lacks"));
    }
    SafetensorsTensor entry;
    entry.name = name;
    entry.dtype = dtype;
    entry.shape = t.sizes().vec();
    entry.data.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
    entries.push_back(std::move(entry));
  }
  return EncodeSafetensors(std::move(entries), metadata);
}

absl::StatusOr<std::vector<v1::ModelFile>> WriteFinalModel(
    const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, tensor] : tensors) archive.write(name, tensor.detach().to(torch::kCPU));
  std::ostringstream archive_bytes;
  archive.save_to(archive_bytes);
  const std::string pt = archive_bytes.str();
  auto safetensors = SafetensorsOf(tensors, metadata);
  if (!safetensors.ok()) return safetensors.status();
  if (auto s = WriteFileAtomically(absl::StrCat(dir, "/", kFinalModelFile), pt); !s.ok()) return s;
  if (auto s = WriteFileAtomically(absl::StrCat(dir, "/", kFinalSafetensorsFile), *safetensors); !s.ok()) return s;
  return std::vector<v1::ModelFile>{Describe(kFinalSafetensorsFile, *safetensors), Describe(kFinalModelFile, pt)};
}

}  // namespace herd
