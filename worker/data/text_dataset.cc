// Character (byte) language-modelling data: fixed-length windows of a text
// file, next-byte targets.
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "worker/data/dataset_loaders.h"
#include "worker/data/tensor_dataset.h"

namespace herd {
namespace {

// Every byte value is a token, so ids mean the same for any file and split.
constexpr int64_t kByteVocabulary = 256;

class TextDataset : public Dataset {
 public:
  TextDataset(torch::Tensor bytes, int64_t sequence_length)
      : bytes_(std::move(bytes)),
        sequence_length_(sequence_length),
        window_offsets_(at::arange(sequence_length + 1, at::kLong)) {}

  // Window i starts at i*T and holds T+1 bytes; windows share one byte.
  int64_t size() const override { return (bytes_.size(0) - 1) / sequence_length_; }
  int64_t num_classes() const override { return kByteVocabulary; }
  std::vector<int64_t> sample_shape() const override { return {sequence_length_}; }

  Batch Get(const std::vector<int64_t>& indices) const override {
    const int64_t n = static_cast<int64_t>(indices.size());
    const torch::Tensor starts = IndexTensor(indices).mul(sequence_length_);
    const torch::Tensor positions = (starts.unsqueeze(1) + window_offsets_).reshape({-1});
    const torch::Tensor windows =
        bytes_.index_select(0, positions).view({n, sequence_length_ + 1}).to(at::kLong);
    return Batch{windows.narrow(1, 0, sequence_length_).contiguous(),
                 windows.narrow(1, 1, sequence_length_).contiguous()};
  }

 private:
  torch::Tensor bytes_;  // uint8, this split only
  int64_t sequence_length_;
  torch::Tensor window_offsets_;  // 0..T
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> LoadTextDataset(const std::string& file, int64_t sequence_length,
                                                         bool train) {
  if (sequence_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.sequence_length must be positive for text data, got ", sequence_length));
  }
  std::ifstream in(file, std::ios::binary);
  if (file.empty() || !in) return absl::NotFoundError(absl::StrCat("dataset.path '", file, "': cannot open"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("dataset.path ", file, ": read error"));

  const int64_t total = static_cast<int64_t>(text.size());
  const int64_t train_bytes = total * 9 / 10;
  const int64_t begin = train ? 0 : train_bytes;
  const int64_t length = train ? train_bytes : total - train_bytes;
  if (length < sequence_length + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset.path ", file, ": too short for sequence_length ", sequence_length, ": its ",
        train ? "train split (first 90%)" : "eval split (last 10%)", " has ", length, " of ", total,
        " bytes but needs at least ", sequence_length + 1));
  }
  torch::Tensor bytes = at::empty({length}, at::kByte);
  std::memcpy(bytes.data_ptr<uint8_t>(), text.data() + begin, length);
  return std::unique_ptr<Dataset>(new TextDataset(std::move(bytes), sequence_length));
}

}  // namespace herd
