// IDX image/label sets (MNIST, Fashion-MNIST, ...): read once into one
// float tensor and one label tensor.
#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "worker/data/dataset_loaders.h"
#include "worker/data/idx_reader.h"
#include "worker/data/tensor_dataset.h"

namespace herd {
namespace {

absl::StatusOr<std::string> FindIdxFile(const std::string& folder, const std::string& name) {
  for (const char* suffix : {".gz", ""}) {
    const std::filesystem::path path = std::filesystem::path(folder) / (name + suffix);
    std::error_code error;
    if (std::filesystem::is_regular_file(path, error)) return path.string();
  }
  return absl::NotFoundError(absl::StrCat("dataset.path ", folder, ": missing ", name, "(.gz)"));
}

absl::StatusOr<IdxArray> ReadIdx(const std::string& folder, const std::string& name, int dims) {
  absl::StatusOr<std::string> file = FindIdxFile(folder, name);
  if (!file.ok()) return file.status();
  absl::StatusOr<IdxArray> array = ReadIdxFile(*file, dims);
  if (!array.ok()) {
    return absl::Status(array.status().code(), absl::StrCat("dataset.path ", folder, ": ", array.status().message()));
  }
  return array;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> LoadIdxDataset(const std::string& folder, bool train) {
  std::error_code error;
  if (folder.empty() || !std::filesystem::is_directory(folder, error)) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path '", folder, "': not a folder (idx needs one)"));
  }
  const std::string split = train ? "train" : "t10k";
  absl::StatusOr<IdxArray> images = ReadIdx(folder, split + "-images-idx3-ubyte", 3);
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxArray> labels = ReadIdx(folder, split + "-labels-idx1-ubyte", 1);
  if (!labels.ok()) return labels.status();

  const int64_t count = images->dims[0];
  if (labels->dims[0] != count) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path ", folder, ": ", count, " images in ", split,
                                                   "-images-idx3-ubyte but ", labels->dims[0], " labels in ", split,
                                                   "-labels-idx1-ubyte"));
  }
  const int64_t height = images->dims[1];
  const int64_t width = images->dims[2];
  if (count > 0 && (height == 0 || width == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.path ", folder, ": images of size ", height, "x", width, " in ", split, " set"));
  }
  uint8_t largest_label = 0;
  for (int64_t i = 0; i < count; ++i) largest_label = std::max(largest_label, labels->data()[i]);

  // from_blob borrows the file buffers; to() makes the owned copies.
  torch::Tensor inputs =
      at::from_blob(const_cast<uint8_t*>(images->data()), {count, 1, height, width}, at::kByte)
          .to(at::kFloat)
          .div_(255.0);
  torch::Tensor targets = at::from_blob(const_cast<uint8_t*>(labels->data()), {count}, at::kByte).to(at::kLong);
  const int64_t num_classes = count > 0 ? int64_t{largest_label} + 1 : 0;
  return std::unique_ptr<Dataset>(new TensorDataset(std::move(inputs), std::move(targets), num_classes));
}

}  // namespace herd
