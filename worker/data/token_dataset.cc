// Language-modelling data from a flat file of little-endian token ids
// (nanoGPT's train.bin), memory-mapped: windows of sequence_length + 1
// tokens, next-token targets, gathered straight from the mapping.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/spec_enums.h"
#include "worker/data/data_error.h"
#include "worker/data/dataset_loaders.h"
#include "worker/data/mapped_file.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian, read in place");

namespace herd {
namespace {

class TokenDataset : public Dataset {
 public:
  // The split is tokens [begin, begin + length) of `file`.
  TokenDataset(std::shared_ptr<const MappedFile> file, int item_bytes, int64_t begin, int64_t length,
               int64_t sequence_length, int64_t vocab_size)
      : file_(std::move(file)),
        item_bytes_(item_bytes),
        begin_(begin),
        length_(length),
        sequence_length_(sequence_length),
        vocab_size_(vocab_size) {}

  // Window i holds tokens [i*T, i*T + T + 1): inputs never overlap, and the
  // last target of one window is the first input of the next.
  int64_t size() const override { return (length_ - 1) / sequence_length_; }
  int64_t num_classes() const override { return vocab_size_; }
  std::vector<int64_t> sample_shape() const override { return {sequence_length_}; }

  Batch Get(const std::vector<int64_t>& indices) const override {
    const int64_t n = static_cast<int64_t>(indices.size()), width = sequence_length_ + 1;
    torch::Tensor windows = at::empty({n, width}, at::kLong);
    int64_t* out = windows.data_ptr<int64_t>();
    for (int64_t row = 0; row < n; ++row) {
      const int64_t index = indices[row];
      TORCH_CHECK(index >= 0 && index < size(), "token sample ", index, " is outside [0, ", size(), ")");
      const int64_t first = begin_ + index * sequence_length_;
      const int64_t largest = item_bytes_ == 2 ? Copy<uint16_t>(first, width, out + row * width)
                                               : Copy<uint32_t>(first, width, out + row * width);
      if (largest >= vocab_size_) ThrowBadToken(first, out + row * width);
    }
    return Batch{windows.narrow(1, 0, sequence_length_).contiguous(), windows.narrow(1, 1, sequence_length_).contiguous()};
  }

 private:
  // Widens `count` tokens from `first` into `out`; returns the largest.
  template <typename Token>
  int64_t Copy(int64_t first, int64_t count, int64_t* out) const {
    const auto* tokens = reinterpret_cast<const Token*>(file_->data()) + first;
    Token largest = 0;
    for (int64_t j = 0; j < count; ++j) {
      out[j] = tokens[j];
      largest = std::max(largest, tokens[j]);
    }
    return largest;
  }

  [[noreturn]] void ThrowBadToken(int64_t first, const int64_t* window) const {
    int64_t j = 0;
    while (window[j] < vocab_size_) ++j;
    const int64_t position = first + j;
    throw DataError(absl::StrCat("dataset file ", file_->path(), ": token id ", window[j], " at byte offset ",
                                 position * item_bytes_, " (token ", position, ") is not below dataset.vocab_size ",
                                 vocab_size_));
  }

  std::shared_ptr<const MappedFile> file_;
  int item_bytes_;
  int64_t begin_, length_, sequence_length_, vocab_size_;
};

absl::StatusOr<std::shared_ptr<const MappedFile>> MapTokenFile(const std::string& field, const std::string& path,
                                                               int item_bytes, const std::string& dtype) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(field, path);
  if (!file.ok()) return file.status();
  if ((*file)->size() % item_bytes != 0) {
    return absl::DataLossError(absl::StrCat(field, " ", path, ": ", (*file)->size(),
                                            " bytes is not a whole number of ", dtype, " tokens (", item_bytes,
                                            " bytes each): the file is truncated or not of dtype ", dtype));
  }
  return std::shared_ptr<const MappedFile>(std::move(*file));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> LoadTokenDataset(const v1::DatasetSpec& spec, bool train) {
  const int64_t length = spec.sequence_length(), vocab = spec.vocab_size();
  if (length <= 0) return absl::InvalidArgumentError("dataset.sequence_length: must be positive for tokens");
  if (vocab < 2) return absl::InvalidArgumentError("dataset.vocab_size: required (at least 2) for tokens");
  const v1::TokenDtype type = spec.dtype() == v1::TOKEN_DTYPE_UNSPECIFIED ? v1::TOKEN_DTYPE_UINT16 : spec.dtype();
  if (type != v1::TOKEN_DTYPE_UINT16 && type != v1::TOKEN_DTYPE_UINT32) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.dtype '", SpecName(type), "': expected uint16 or uint32"));
  }
  const std::string dtype = SpecName(type);
  const int item_bytes = type == v1::TOKEN_DTYPE_UINT16 ? 2 : 4;
  const bool separate = !train && !spec.validation_path().empty();
  const std::string field = separate ? "dataset.validation_path" : "dataset.path";
  const std::string& path = separate ? spec.validation_path() : spec.path();
  absl::StatusOr<std::shared_ptr<const MappedFile>> file = MapTokenFile(field, path, item_bytes, dtype);
  if (!file.ok()) return file.status();

  const int64_t total = (*file)->size() / item_bytes;
  int64_t begin = 0, count = total;
  const char* split = "the file";
  if (spec.validation_path().empty()) {  // train: the first 90%, eval: the last 10%
    const int64_t train_tokens = total * 9 / 10;
    begin = train ? 0 : train_tokens;
    count = train ? train_tokens : total - train_tokens;
    split = train ? "its train split (first 90%)" : "its validation split (last 10%)";
  }
  if (count < length + 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", path, ": shorter than one window: ", split, " has ",
                                                   count, " of ", total, " tokens but dataset.sequence_length ",
                                                   length, " needs at least ", length + 1));
  }
  return std::unique_ptr<Dataset>(new TokenDataset(std::move(*file), item_bytes, begin, count, length, vocab));
}

}  // namespace herd
