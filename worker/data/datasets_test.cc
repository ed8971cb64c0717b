#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "worker/data/dataset.h"
#include "worker/data/testing/idx_test_files.h"

namespace herd {
namespace {

void ExpectContains(const absl::Status& status, const std::string& text) {
  EXPECT_NE(status.message().find(text), std::string::npos) << "'" << text << "' not in: " << status;
}

v1::DatasetSpec IdxSpec(const std::string& folder) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_IDX);
  spec.set_path(folder);
  return spec;
}

// A tiny IDX set: `count` images of 2x3 pixels and their labels.
struct TinyIdx {
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;
};

TinyIdx WriteTinyIdx(const std::string& folder, const std::string& split, int count, bool gzip) {
  TinyIdx set;
  for (int i = 0; i < count * 6; ++i) set.pixels.push_back(static_cast<uint8_t>((i * 37 + split.size()) % 256));
  for (int i = 0; i < count; ++i) set.labels.push_back(static_cast<uint8_t>((i * 3) % 7));
  auto write = gzip ? WriteGzipFile : WriteRawFile;
  const std::string suffix = gzip ? ".gz" : "";
  write(folder + "/" + split + "-images-idx3-ubyte" + suffix, IdxBytes({uint32_t(count), 2, 3}, set.pixels));
  write(folder + "/" + split + "-labels-idx1-ubyte" + suffix, IdxBytes({uint32_t(count)}, set.labels));
  return set;
}

TEST(IdxDatasetTest, LoadsBothSplitsExactlyFromGzipAndRaw) {
  const std::string folder = MakeTempFolder("idx_set");
  const TinyIdx train = WriteTinyIdx(folder, "train", 9, /*gzip=*/true);
  const TinyIdx eval = WriteTinyIdx(folder, "t10k", 4, /*gzip=*/false);

  for (bool is_train : {true, false}) {
    const TinyIdx& expected = is_train ? train : eval;
    auto dataset = LoadDataset(IdxSpec(folder), is_train, 0);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    const Dataset& set = **dataset;
    EXPECT_EQ(set.size(), static_cast<int64_t>(expected.labels.size()));
    EXPECT_EQ(set.sample_shape(), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(set.num_classes(), *std::max_element(expected.labels.begin(), expected.labels.end()) + 1);

    Batch batch = set.Get({3, 0, 3});
    ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{3, 1, 2, 3}));
    EXPECT_EQ(batch.inputs.scalar_type(), at::kFloat);
    EXPECT_EQ(batch.targets.scalar_type(), at::kLong);
    const int order[3] = {3, 0, 3};
    for (int row = 0; row < 3; ++row) {
      const int sample = order[row];
      EXPECT_EQ(batch.targets[row].item<int64_t>(), expected.labels[sample]);
      at::Tensor pixels = batch.inputs[row].flatten();
      for (int p = 0; p < 6; ++p) {
        EXPECT_FLOAT_EQ(pixels[p].item<float>(), expected.pixels[sample * 6 + p] / 255.0f);
      }
    }
  }
}

TEST(IdxDatasetTest, EmptyBatch) {
  const std::string folder = MakeTempFolder("idx_empty_batch");
  WriteTinyIdx(folder, "train", 3, true);
  auto dataset = LoadDataset(IdxSpec(folder), true, 0);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  Batch batch = (*dataset)->Get({});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batch.targets.sizes(), (std::vector<int64_t>{0}));
}

TEST(IdxDatasetTest, OutOfRangeIndexThrows) {
  const std::string folder = MakeTempFolder("idx_range");
  WriteTinyIdx(folder, "train", 3, true);
  auto dataset = LoadDataset(IdxSpec(folder), true, 0);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THROW((*dataset)->Get({3}), c10::Error);
}

TEST(IdxDatasetTest, MissingFile) {
  const std::string folder = MakeTempFolder("idx_missing");
  WriteTinyIdx(folder, "t10k", 3, true);
  absl::Status status = LoadDataset(IdxSpec(folder), true, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  ExpectContains(status, "dataset.path " + folder + ": missing train-images-idx3-ubyte(.gz)");
}

TEST(IdxDatasetTest, NotAFolder) {
  absl::Status status = LoadDataset(IdxSpec("/nonexistent/fashion"), true, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "dataset.path '/nonexistent/fashion'");
}

TEST(IdxDatasetTest, GarbledMagic) {
  const std::string folder = MakeTempFolder("idx_bad_magic");
  WriteTinyIdx(folder, "train", 3, false);
  std::vector<uint8_t> bytes = IdxBytes({3}, {0, 1, 2});
  bytes[0] = 0x1f;
  WriteRawFile(folder + "/train-labels-idx1-ubyte", bytes);
  absl::Status status = LoadDataset(IdxSpec(folder), true, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "dataset.path " + folder);
  ExpectContains(status, "bad IDX magic 0x1f000801");
  ExpectContains(status, "train-labels-idx1-ubyte");
}

TEST(IdxDatasetTest, TruncatedImages) {
  const std::string folder = MakeTempFolder("idx_truncated_set");
  WriteTinyIdx(folder, "train", 3, false);
  std::vector<uint8_t> bytes = IdxBytes({3, 2, 3}, std::vector<uint8_t>(18, 1));
  bytes.resize(bytes.size() - 5);
  WriteGzipFile(folder + "/train-images-idx3-ubyte.gz", bytes);  // .gz is preferred over raw
  absl::Status status = LoadDataset(IdxSpec(folder), true, 0).status();
  ExpectContains(status, "train-images-idx3-ubyte.gz: truncated: expected 34 bytes, got 29");
}

TEST(IdxDatasetTest, LabelAndImageCountsMustMatch) {
  const std::string folder = MakeTempFolder("idx_count_mismatch");
  WriteTinyIdx(folder, "train", 3, true);
  WriteGzipFile(folder + "/train-labels-idx1-ubyte.gz", IdxBytes({4}, {0, 1, 2, 3}));
  absl::Status status = LoadDataset(IdxSpec(folder), true, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "3 images in train-images-idx3-ubyte but 4 labels in train-labels-idx1-ubyte");
}

TEST(IdxDatasetTest, RealFashionMnist) {
  const std::string folder = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(folder)) GTEST_SKIP() << folder << " is not installed";
  for (bool train : {true, false}) {
    auto dataset = LoadDataset(IdxSpec(folder), train, 0);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_EQ((*dataset)->size(), train ? 60000 : 10000);
    EXPECT_EQ((*dataset)->sample_shape(), (std::vector<int64_t>{1, 28, 28}));
    EXPECT_EQ((*dataset)->num_classes(), 10);
    std::vector<int64_t> all((*dataset)->size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    Batch batch = (*dataset)->Get(all);
    EXPECT_GE(batch.targets.min().item<int64_t>(), 0);
    EXPECT_LT(batch.targets.max().item<int64_t>(), 10);
    EXPECT_GE(batch.inputs.min().item<float>(), 0.0f);
    EXPECT_LE(batch.inputs.max().item<float>(), 1.0f);
    EXPECT_GT(batch.inputs.max().item<float>(), 0.99f);  // really scaled by 255, not by something larger
    // Balanced classes: 6000 / 1000 of each.
    EXPECT_EQ(batch.targets.eq(7).sum().item<int64_t>(), train ? 6000 : 1000);
  }
}

v1::DatasetSpec TextSpec(const std::string& file, int64_t sequence_length) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_TEXT);
  spec.set_path(file);
  spec.set_sequence_length(sequence_length);
  return spec;
}

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = MakeTempFolder("text_" + name) + "/corpus.txt";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(TextDatasetTest, WindowsOfNextBytes) {
  std::string text;
  for (int i = 0; i < 100; ++i) text.push_back(static_cast<char>(i * 2 + 50));  // includes bytes >= 128
  const std::string file = WriteText("windows", text);

  auto train = LoadDataset(TextSpec(file, 4), true, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->size(), (90 - 1) / 4);
  EXPECT_EQ((*train)->num_classes(), 256);
  EXPECT_EQ((*train)->sample_shape(), (std::vector<int64_t>{4}));
  Batch batch = (*train)->Get({2, 0});
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 4}));
  ASSERT_EQ(batch.targets.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(batch.inputs.scalar_type(), at::kLong);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(batch.inputs[0][t].item<int64_t>(), static_cast<uint8_t>(text[8 + t]));
    EXPECT_EQ(batch.targets[0][t].item<int64_t>(), static_cast<uint8_t>(text[9 + t]));
    EXPECT_EQ(batch.inputs[1][t].item<int64_t>(), static_cast<uint8_t>(text[t]));
    EXPECT_EQ(batch.targets[1][t].item<int64_t>(), static_cast<uint8_t>(text[1 + t]));
  }
  // The last train window stays inside the first 90 bytes.
  Batch last = (*train)->Get({(*train)->size() - 1});
  EXPECT_EQ(last.targets[0][3].item<int64_t>(), static_cast<uint8_t>(text[88]));

  auto eval = LoadDataset(TextSpec(file, 4), false, 0);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ((*eval)->size(), (10 - 1) / 4);
  Batch first_eval = (*eval)->Get({0});
  EXPECT_EQ(first_eval.inputs[0][0].item<int64_t>(), static_cast<uint8_t>(text[90]));
  EXPECT_EQ((*eval)->Get({}).inputs.sizes(), (std::vector<int64_t>{0, 4}));
}

TEST(TextDatasetTest, TooShortFile) {
  const std::string file = WriteText("short", std::string(40, 'x'));
  absl::Status status = LoadDataset(TextSpec(file, 8), false, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "too short for sequence_length 8");
  ExpectContains(status, "eval split");
  EXPECT_TRUE(LoadDataset(TextSpec(file, 8), true, 0).ok());
}

TEST(TextDatasetTest, BadArguments) {
  EXPECT_EQ(LoadDataset(TextSpec("/nonexistent.txt", 8), true, 0).status().code(), absl::StatusCode::kNotFound);
  const std::string file = WriteText("zero", std::string(100, 'x'));
  ExpectContains(LoadDataset(TextSpec(file, 0), true, 0).status(), "dataset.sequence_length");
}

v1::DatasetSpec SyntheticSpec(int64_t samples, int64_t features, int64_t classes) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_SYNTHETIC);
  spec.set_synthetic_samples(samples);
  spec.set_synthetic_features(features);
  spec.set_synthetic_classes(classes);
  return spec;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[i] = i;
  return all;
}

TEST(SyntheticDatasetTest, DeterministicFromTheSeed) {
  auto a = LoadDataset(SyntheticSpec(400, 12, 5), true, 7);
  auto b = LoadDataset(SyntheticSpec(400, 12, 5), true, 7);
  auto c = LoadDataset(SyntheticSpec(400, 12, 5), true, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((*a)->size(), 400);
  EXPECT_EQ((*a)->sample_shape(), (std::vector<int64_t>{12}));
  EXPECT_EQ((*a)->num_classes(), 5);
  Batch x = (*a)->Get(Range(400)), y = (*b)->Get(Range(400)), z = (*c)->Get(Range(400));
  EXPECT_TRUE(x.inputs.equal(y.inputs));
  EXPECT_TRUE(x.targets.equal(y.targets));
  EXPECT_FALSE(x.inputs.equal(z.inputs));
  EXPECT_GE(x.targets.min().item<int64_t>(), 0);
  EXPECT_LT(x.targets.max().item<int64_t>(), 5);
}

TEST(SyntheticDatasetTest, EvalIsAnEighthWithFreshSamplesFromTheSameTeacher) {
  const int64_t features = 16, classes = 4;
  auto train = LoadDataset(SyntheticSpec(4000, features, classes), true, 3);
  auto eval = LoadDataset(SyntheticSpec(4000, features, classes), false, 3);
  ASSERT_TRUE(train.ok() && eval.ok());
  EXPECT_EQ((*eval)->size(), 500);
  Batch tr = (*train)->Get(Range(4000));
  Batch ev = (*eval)->Get(Range(500));
  EXPECT_FALSE(tr.inputs.narrow(0, 0, 500).equal(ev.inputs));
  // Class means learned on train classify eval far above chance (0.25) only
  // if both splits were labelled by the same teacher.
  at::Tensor means = at::zeros({classes, features});
  means.index_add_(0, tr.targets, tr.inputs);
  const double accuracy = ev.inputs.matmul(means.t()).argmax(1).eq(ev.targets).to(at::kFloat).mean().item<double>();
  EXPECT_GT(accuracy, 0.6);
}

TEST(SyntheticDatasetTest, BadSizes) {
  ExpectContains(LoadDataset(SyntheticSpec(0, 4, 2), true, 0).status(), "dataset.synthetic_samples");
  ExpectContains(LoadDataset(SyntheticSpec(10, 0, 2), true, 0).status(), "dataset.synthetic_features");
  ExpectContains(LoadDataset(SyntheticSpec(10, 4, 1), true, 0).status(), "dataset.synthetic_classes");
}

TEST(LoadDatasetTest, UnknownKind) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DatasetKind(99));  // a number no value has
  absl::Status status = LoadDataset(spec, true, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "dataset.kind '99': expected idx, text, synthetic, tokens, npy");
}

}  // namespace
}  // namespace herd
