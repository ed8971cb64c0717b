// Classification data from NumPy .npy files (inputs [N, ...], class targets
// [N]), memory-mapped: a batch is an index_select straight from the mapping,
// the same gather an in-memory set does.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/data/dataset_loaders.h"
#include "worker/data/mapped_file.h"
#include "worker/data/npy_header.h"
#include "worker/data/tensor_dataset.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, ".npy data is read in place as little-endian");

namespace herd {
namespace {

// One mapped .npy file viewed as a tensor over the mapping (never written).
struct NpyArray {
  std::shared_ptr<const MappedFile> file;
  NpyHeader header;
  torch::Tensor tensor;
};

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("(", absl::StrJoin(shape, ", "), ")"); }

absl::StatusOr<NpyArray> MapNpy(const std::string& field, const std::string& path,
                                const std::vector<std::pair<std::string, at::ScalarType>>& dtypes) {
  auto bad = [&](absl::StatusCode code, const std::string& what) {
    return absl::Status(code, absl::StrCat(field, " ", path, ": ", what));
  };
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(field, path);
  if (!file.ok()) return file.status();
  absl::StatusOr<NpyHeader> header = ParseNpyHeader((*file)->data(), (*file)->size());
  if (!header.ok()) return bad(header.status().code(), std::string(header.status().message()));
  // '|u1' and '<u1' are the same type; compare the kind and width only.
  at::ScalarType type = at::ScalarType::Undefined;
  std::vector<std::string> allowed;
  for (const auto& [name, scalar] : dtypes) {
    allowed.push_back(name);
    if (header->descr.substr(1) == name) type = scalar;
  }
  if (type == at::ScalarType::Undefined) {
    return bad(absl::StatusCode::kInvalidArgument,
               absl::StrCat("dtype '", header->descr, "' is not supported here (expected ", absl::StrJoin(allowed, ", "),
                            ")"));
  }
  const int64_t expected = header->element_count() * header->item_bytes;
  const int64_t present = (*file)->size() - header->data_offset;
  if (present < expected) {
    return bad(absl::StatusCode::kDataLoss,
               absl::StrCat("truncated: shape ", ShapeText(header->shape), " of '", header->descr, "' needs ", expected,
                            " bytes of data, the file holds ", present));
  }
  if (present > expected) {
    return bad(absl::StatusCode::kInvalidArgument,
               absl::StrCat(present - expected, " bytes after the data of shape ", ShapeText(header->shape),
                            " of '", header->descr, "': not a single .npy array"));
  }
  NpyArray array{std::shared_ptr<const MappedFile>(std::move(*file)), *header, {}};
  array.tensor = at::from_blob(const_cast<uint8_t*>(array.file->data() + header->data_offset), header->shape,
                               at::TensorOptions().dtype(type));
  return array;
}

// What the dtypes mean: floats as they are, uint8 scaled to [0, 1] (as
// images are), class targets as int64.
const std::vector<std::pair<std::string, at::ScalarType>> kInputTypes = {
    {"f4", at::kFloat}, {"f2", at::kHalf}, {"u1", at::kByte}};
const std::vector<std::pair<std::string, at::ScalarType>> kTargetTypes = {{"i8", at::kLong}, {"i4", at::kInt}};

class NpyDataset : public Dataset {
 public:
  NpyDataset(NpyArray inputs, NpyArray targets, int64_t begin, int64_t count, int64_t num_classes)
      : inputs_(std::move(inputs)),
        targets_(std::move(targets)),
        input_rows_(inputs_.tensor.narrow(0, begin, count)),
        target_rows_(targets_.tensor.narrow(0, begin, count)),
        num_classes_(num_classes) {}

  int64_t size() const override { return input_rows_.size(0); }
  int64_t num_classes() const override { return num_classes_; }
  std::vector<int64_t> sample_shape() const override {
    auto sizes = input_rows_.sizes();
    return std::vector<int64_t>(sizes.begin() + 1, sizes.end());
  }

  Batch Get(const std::vector<int64_t>& indices) const override {
    const torch::Tensor index = IndexTensor(indices);
    torch::Tensor inputs = input_rows_.index_select(0, index);
    if (inputs.scalar_type() == at::kByte) {
      inputs = inputs.to(at::kFloat).div_(255.0);
    } else if (inputs.scalar_type() != at::kFloat) {
      inputs = inputs.to(at::kFloat);
    }
    return Batch{std::move(inputs), target_rows_.index_select(0, index).to(at::kLong)};
  }

 private:
  NpyArray inputs_, targets_;  // keep the mappings alive
  torch::Tensor input_rows_, target_rows_;
  int64_t num_classes_;
};

// The first target outside [0, limit) in rows [begin, begin + count), as an
// error naming the file, the row and the value. Scans in chunks, so a
// billion rows cost a chunk of memory, not a copy of the file.
absl::Status CheckTargets(const std::string& field, const NpyArray& targets, int64_t begin, int64_t count,
                          int64_t limit) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (int64_t at = 0; at < count; at += kChunk) {
    const torch::Tensor rows = targets.tensor.narrow(0, begin + at, std::min(kChunk, count - at)).to(at::kLong);
    const torch::Tensor bad = (rows < 0).logical_or_(rows >= limit).nonzero();
    if (bad.numel() == 0) continue;
    const int64_t row = bad[0][0].item<int64_t>();
    return absl::InvalidArgumentError(absl::StrCat(field, " ", targets.file->path(), ": target ",
                                                   rows[row].item<int64_t>(), " at row ", begin + at + row,
                                                   " is outside [0, ", limit, ") (dataset.num_classes ", limit, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<NpyArray, NpyArray>> MapPair(const std::string& inputs_field, const std::string& inputs_path,
                                                      const std::string& targets_field,
                                                      const std::string& targets_path) {
  absl::StatusOr<NpyArray> inputs = MapNpy(inputs_field, inputs_path, kInputTypes);
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<NpyArray> targets = MapNpy(targets_field, targets_path, kTargetTypes);
  if (!targets.ok()) return targets.status();
  const auto& in = inputs->header.shape;
  const auto& out = targets->header.shape;
  if (in.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(inputs_field, " ", inputs_path, ": shape ", ShapeText(in),
                                                   ": inputs need a sample dimension and at least one more"));
  }
  if (out.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(targets_field, " ", targets_path, ": shape ", ShapeText(out),
                                                   ": class targets must be one-dimensional (N,)"));
  }
  if (in[0] != out[0]) {
    return absl::InvalidArgumentError(absl::StrCat(inputs_field, " ", inputs_path, " has ", in[0], " rows but ",
                                                   targets_field, " ", targets_path, " has ", out[0]));
  }
  return std::make_pair(std::move(*inputs), std::move(*targets));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> LoadNpyDataset(const v1::DatasetSpec& spec, bool train) {
  if (spec.inputs().empty() || spec.targets().empty()) {
    return absl::InvalidArgumentError("dataset.inputs and dataset.targets: required for dataset.kind npy");
  }
  const bool separate = !spec.validation_inputs().empty();
  auto train_pair = MapPair("dataset.inputs", spec.inputs(), "dataset.targets", spec.targets());
  if (!train_pair.ok()) return train_pair.status();
  const int64_t rows = train_pair->first.header.shape[0];
  const int64_t train_rows = separate ? rows : rows * 9 / 10;

  int64_t num_classes = spec.num_classes();
  if (num_classes == 0 && train_rows > 0) {
    num_classes = train_pair->second.tensor.narrow(0, 0, train_rows).max().item<int64_t>() + 1;
  }
  if (train) {
    if (train_rows == 0) {
      return absl::InvalidArgumentError(absl::StrCat("dataset.inputs ", spec.inputs(), ": no training rows"));
    }
    if (auto s = CheckTargets("dataset.targets", train_pair->second, 0, train_rows, num_classes); !s.ok()) return s;
    return std::unique_ptr<Dataset>(new NpyDataset(std::move(train_pair->first), std::move(train_pair->second), 0,
                                                   train_rows, num_classes));
  }
  if (!separate) {
    if (auto s = CheckTargets("dataset.targets", train_pair->second, train_rows, rows - train_rows, num_classes);
        !s.ok()) {
      return s;
    }
    return std::unique_ptr<Dataset>(new NpyDataset(std::move(train_pair->first), std::move(train_pair->second),
                                                   train_rows, rows - train_rows, num_classes));
  }
  auto eval_pair = MapPair("dataset.validation_inputs", spec.validation_inputs(), "dataset.validation_targets",
                           spec.validation_targets());
  if (!eval_pair.ok()) return eval_pair.status();
  const auto& train_shape = train_pair->first.header.shape;
  const auto& eval_shape = eval_pair->first.header.shape;
  if (!std::equal(train_shape.begin() + 1, train_shape.end(), eval_shape.begin() + 1, eval_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.validation_inputs ", spec.validation_inputs(), ": shape ",
                                                   ShapeText(eval_shape), " has other samples than dataset.inputs' ",
                                                   ShapeText(train_shape)));
  }
  const int64_t eval_rows = eval_shape[0];
  if (auto s = CheckTargets("dataset.validation_targets", eval_pair->second, 0, eval_rows, num_classes); !s.ok()) {
    return s;
  }
  return std::unique_ptr<Dataset>(new NpyDataset(std::move(eval_pair->first), std::move(eval_pair->second), 0,
                                                 eval_rows, num_classes));
}

}  // namespace herd
