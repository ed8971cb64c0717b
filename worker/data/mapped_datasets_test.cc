// The memory-mapped dataset kinds (tokens, npy) on small files made here:
// exact samples, both splits, and a clear error for each kind of bad data.
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numeric>

#include "gtest/gtest.h"
#include "worker/data/data_error.h"
#include "worker/data/dataset.h"
#include "worker/data/testing/idx_test_files.h"
#include "worker/data/testing/npy_test_files.h"

namespace herd {
namespace {

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::vector<std::string>& texts) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& text : texts) {
    EXPECT_NE(status.message().find(text), std::string::npos) << "'" << text << "' not in: " << status;
  }
}

v1::DatasetSpec TokenSpec(const std::string& path, int64_t vocab, int64_t length,
                          v1::TokenDtype dtype = v1::TOKEN_DTYPE_UINT16) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_TOKENS);
  spec.set_path(path);
  spec.set_vocab_size(vocab);
  spec.set_sequence_length(length);
  spec.set_dtype(dtype);
  return spec;
}

std::vector<int64_t> Row(const torch::Tensor& t, int64_t row) {
  const torch::Tensor r = t[row].contiguous().to(at::kLong);
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

std::vector<int64_t> Range(int64_t from, int64_t count, int64_t step = 1) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(from + i * step);
  return out;
}

TEST(TokenDataset, WindowsAreNextTokenPairsOverBothSplits) {
  const std::string folder = MakeTempFolder("tokens");
  std::vector<uint16_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);  // token k has id k: a window's ids are its positions
  WriteFile(folder + "/train.bin", RawBytes(tokens));

  auto train = LoadDataset(TokenSpec(folder + "/train.bin", 1000, 16), /*train=*/true, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->size(), (900 - 1) / 16);  // the first 90%, non-overlapping windows
  EXPECT_EQ((*train)->num_classes(), 1000);
  EXPECT_EQ((*train)->sample_shape(), (std::vector<int64_t>{16}));
  Batch batch = (*train)->Get({3, 0, 55});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{3, 16}));
  EXPECT_EQ(batch.inputs.scalar_type(), at::kLong);
  EXPECT_EQ(Row(batch.inputs, 0), Range(48, 16));
  EXPECT_EQ(Row(batch.targets, 0), Range(49, 16));
  EXPECT_EQ(Row(batch.inputs, 1), Range(0, 16));
  EXPECT_EQ(Row(batch.targets, 2), Range(55 * 16 + 1, 16));
  EXPECT_THROW((*train)->Get({56}), c10::Error);
  EXPECT_EQ((*train)->Get({}).inputs.size(0), 0);

  auto eval = LoadDataset(TokenSpec(folder + "/train.bin", 1000, 16), /*train=*/false, 0);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ((*eval)->size(), (100 - 1) / 16);
  EXPECT_EQ(Row((*eval)->Get({1}).inputs, 0), Range(916, 16));

  // A separate validation file is the whole eval split; train is all of path.
  std::vector<uint16_t> validation(40, 7);
  WriteFile(folder + "/val.bin", RawBytes(validation));
  v1::DatasetSpec both = TokenSpec(folder + "/train.bin", 1000, 16);
  both.set_validation_path(folder + "/val.bin");
  auto whole = LoadDataset(both, true, 0);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ((*whole)->size(), 999 / 16);
  auto val = LoadDataset(both, false, 0);
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ((*val)->size(), 39 / 16);
  EXPECT_EQ(Row((*val)->Get({1}).targets, 0), std::vector<int64_t>(16, 7));
}

TEST(TokenDataset, Uint32IdsBeyondSixteenBits) {
  const std::string folder = MakeTempFolder("tokens32");
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 200; ++i) tokens.push_back(100000 + i);
  WriteFile(folder + "/t.bin", RawBytes(tokens));
  auto set = LoadDataset(TokenSpec(folder + "/t.bin", 100200, 8, v1::TOKEN_DTYPE_UINT32), true, 0);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(Row((*set)->Get({2}).inputs, 0), Range(100016, 8));
}

TEST(TokenDataset, AnIdAtOrAboveTheVocabularyFailsNamingFileOffsetAndId) {
  const std::string folder = MakeTempFolder("badtoken");
  std::vector<uint16_t> tokens(400, 3);
  tokens[37] = 500;  // in window 4 (tokens 32..40) and, as its last target, nowhere else
  WriteFile(folder + "/t.bin", RawBytes(tokens));
  auto set = LoadDataset(TokenSpec(folder + "/t.bin", 500, 8), true, 0);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_NO_THROW((*set)->Get({0, 1, 2, 3, 5, 6}));
  try {
    (*set)->Get({1, 4});
    FAIL() << "a token id of 500 with vocab_size 500 was gathered";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(folder + "/t.bin"), std::string::npos) << message;
    EXPECT_NE(message.find("token id 500 at byte offset 74 (token 37)"), std::string::npos) << message;
    EXPECT_NE(message.find("dataset.vocab_size 500"), std::string::npos) << message;
  }
}

TEST(TokenDataset, BadFilesAreRefusedNamingTheFile) {
  const std::string folder = MakeTempFolder("badfiles");
  WriteFile(folder + "/odd.bin", std::string(301, '\1'));
  ExpectError(LoadDataset(TokenSpec(folder + "/odd.bin", 500, 8), true, 0).status(), absl::StatusCode::kDataLoss,
              {"dataset.path " + folder + "/odd.bin", "301 bytes is not a whole number of uint16 tokens"});
  WriteFile(folder + "/six.bin", std::string(6, '\1'));
  ExpectError(LoadDataset(TokenSpec(folder + "/six.bin", 500, 8, v1::TOKEN_DTYPE_UINT32), true, 0).status(),
              absl::StatusCode::kDataLoss, {"6 bytes is not a whole number of uint32 tokens"});

  WriteFile(folder + "/short.bin", RawBytes(std::vector<uint16_t>(80, 1)));
  ExpectError(LoadDataset(TokenSpec(folder + "/short.bin", 500, 72), true, 0).status(),
              absl::StatusCode::kInvalidArgument,
              {folder + "/short.bin", "shorter than one window", "72 of 80 tokens", "at least 73"});
  v1::DatasetSpec short_validation = TokenSpec(folder + "/short.bin", 500, 8);
  short_validation.set_validation_path(folder + "/six.bin");
  ExpectError(LoadDataset(short_validation, false, 0).status(), absl::StatusCode::kInvalidArgument,
              {"dataset.validation_path " + folder + "/six.bin", "shorter than one window"});

  ExpectError(LoadDataset(TokenSpec(folder + "/none.bin", 500, 8), true, 0).status(), absl::StatusCode::kNotFound,
              {folder + "/none.bin", "no such file"});
  ExpectError(LoadDataset(TokenSpec(folder, 500, 8), true, 0).status(), absl::StatusCode::kInvalidArgument,
              {folder, "not a regular file"});
  ASSERT_EQ(::mkfifo((folder + "/fifo").c_str(), 0600), 0);
  ExpectError(LoadDataset(TokenSpec(folder + "/fifo", 500, 8), true, 0).status(), absl::StatusCode::kInvalidArgument,
              {"not a regular file"});
  WriteFile(folder + "/empty.bin", "");
  ExpectError(LoadDataset(TokenSpec(folder + "/empty.bin", 500, 8), true, 0).status(),
              absl::StatusCode::kInvalidArgument, {"the file is empty"});
}

// Drops the capabilities that let root read any file, from this process's
// effective set, so file modes apply to it as to any other user.
bool DropFileReadOverride() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH}) data[cap / 32].effective &= ~(1u << (cap % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}

// The trainer reads with the worker's rights (docs/security.md): a file the
// worker's user may not read is refused as such. The load runs in a child
// without root's override of file modes.
TEST(TokenDataset, AFileTheWorkerMayNotReadIsRefused) {
  const std::string folder = MakeTempFolder("private");
  const std::string path = folder + "/secret.bin";
  WriteFile(path, RawBytes(std::vector<uint16_t>(100, 1)));
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(out[0]);
    if (!DropFileReadOverride()) ::_exit(3);
    const std::string status = LoadDataset(TokenSpec(path, 500, 8), true, 0).status().ToString();
    (void)!::write(out[1], status.data(), status.size());
    ::_exit(0);
  }
  ::close(out[1]);
  std::string status;
  char buffer[512];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) status.append(buffer, n);
  ::close(out[0]);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 3) GTEST_SKIP() << "cannot drop CAP_DAC_OVERRIDE here";
  EXPECT_NE(status.find("PERMISSION_DENIED"), std::string::npos) << status;
  EXPECT_NE(status.find("dataset.path " + path + ": permission denied"), std::string::npos) << status;
}

v1::DatasetSpec NpySpec(const std::string& inputs, const std::string& targets) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_NPY);
  spec.set_inputs(inputs);
  spec.set_targets(targets);
  return spec;
}

TEST(NpyDataset, RowsOfEachInputDtypeMatchTheArrays) {
  const std::string folder = MakeTempFolder("npy");
  std::vector<float> x(20 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i);
  std::vector<int64_t> y;
  for (int i = 0; i < 20; ++i) y.push_back(i % 4);
  WriteFile(folder + "/x.npy", NpyBytes("<f4", {20, 3}, RawBytes(x)));
  WriteFile(folder + "/y.npy", NpyBytes("<i8", {20}, RawBytes(y)));

  auto train = LoadDataset(NpySpec(folder + "/x.npy", folder + "/y.npy"), true, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->size(), 18);  // the first 90% of the rows
  EXPECT_EQ((*train)->num_classes(), 4);
  EXPECT_EQ((*train)->sample_shape(), (std::vector<int64_t>{3}));
  Batch batch = (*train)->Get({5, 0, 17});
  EXPECT_EQ(batch.inputs.scalar_type(), at::kFloat);
  EXPECT_EQ(batch.targets.scalar_type(), at::kLong);
  EXPECT_TRUE(batch.inputs.equal(torch::tensor({7.5f, 8.0f, 8.5f, 0.0f, 0.5f, 1.0f, 25.5f, 26.0f, 26.5f}).view({3, 3})));
  EXPECT_EQ(Row(batch.targets.unsqueeze(0), 0), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_THROW((*train)->Get({18}), c10::Error);
  auto eval = LoadDataset(NpySpec(folder + "/x.npy", folder + "/y.npy"), false, 0);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ((*eval)->size(), 2);
  EXPECT_EQ((*eval)->Get({1}).inputs[0][0].item<float>(), 0.5f * 57);

  // uint8 images scale to [0, 1]; float16 widens; int32 targets widen.
  std::vector<uint8_t> pixels(10 * 2 * 2);
  std::iota(pixels.begin(), pixels.end(), 0);
  pixels[39] = 255;
  WriteFile(folder + "/px.npy", NpyBytes("|u1", {10, 1, 2, 2}, RawBytes(pixels), 2));
  std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
  WriteFile(folder + "/py.npy", NpyBytes("<i4", {10}, RawBytes(labels), 3));
  v1::DatasetSpec images = NpySpec(folder + "/px.npy", folder + "/py.npy");
  images.set_validation_inputs(folder + "/px.npy");
  images.set_validation_targets(folder + "/py.npy");
  auto image_set = LoadDataset(images, true, 0);
  ASSERT_TRUE(image_set.ok()) << image_set.status();
  EXPECT_EQ((*image_set)->size(), 10);  // validation files given: train is every row
  EXPECT_EQ((*image_set)->sample_shape(), (std::vector<int64_t>{1, 2, 2}));
  Batch image_batch = (*image_set)->Get({9, 2});
  EXPECT_TRUE(image_batch.inputs[0].flatten().equal(torch::tensor({36.f, 37.f, 38.f, 255.f}).div(255.0)));
  EXPECT_EQ(image_batch.targets[1].item<int64_t>(), 2);
  EXPECT_EQ(image_batch.targets.scalar_type(), at::kLong);

  std::vector<at::Half> halves = {at::Half(1.5f), at::Half(-2.0f), at::Half(0.25f), at::Half(4.0f)};
  WriteFile(folder + "/h.npy", NpyBytes("<f2", {2, 2}, RawBytes(halves)));
  WriteFile(folder + "/hy.npy", NpyBytes("<i8", {2}, RawBytes(std::vector<int64_t>{0, 1})));
  v1::DatasetSpec half = NpySpec(folder + "/h.npy", folder + "/hy.npy");
  half.set_validation_inputs(folder + "/h.npy");
  half.set_validation_targets(folder + "/hy.npy");
  auto half_set = LoadDataset(half, true, 0);
  ASSERT_TRUE(half_set.ok()) << half_set.status();
  Batch half_batch = (*half_set)->Get({1, 0});
  EXPECT_EQ(half_batch.inputs.scalar_type(), at::kFloat);
  EXPECT_TRUE(half_batch.inputs.equal(torch::tensor({0.25f, 4.0f, 1.5f, -2.0f}).view({2, 2})));
}

TEST(NpyDataset, BadArraysAreRefusedNamingTheFileAndWhy) {
  const std::string folder = MakeTempFolder("badnpy");
  const std::string x = folder + "/x.npy", y = folder + "/y.npy";
  WriteFile(x, NpyBytes("<f4", {10, 2}, std::string(80, '\0')));
  WriteFile(y, NpyBytes("<i8", {10}, RawBytes(std::vector<int64_t>(10, 1))));
  ASSERT_TRUE(LoadDataset(NpySpec(x, y), true, 0).ok());
  auto refused = [&](const std::string& inputs, const std::string& targets) {
    return LoadDataset(NpySpec(inputs, targets), true, 0).status();
  };

  WriteFile(folder + "/truncated.npy", NpyBytes("<f4", {10, 2}, std::string(79, '\0')));
  ExpectError(refused(folder + "/truncated.npy", y), absl::StatusCode::kDataLoss,
              {"dataset.inputs " + folder + "/truncated.npy", "truncated", "(10, 2)", "needs 80 bytes",
               "holds 79"});
  WriteFile(folder + "/long.npy", NpyBytes("<f4", {10, 2}, std::string(81, '\0')));
  ExpectError(refused(folder + "/long.npy", y), absl::StatusCode::kInvalidArgument,
              {"1 bytes after the data"});
  WriteFile(folder + "/f8.npy", NpyBytes("<f8", {10, 2}, std::string(160, '\0')));
  ExpectError(refused(folder + "/f8.npy", y), absl::StatusCode::kInvalidArgument,
              {folder + "/f8.npy", "dtype '<f8' is not supported here (expected f4, f2, u1)"});
  WriteFile(folder + "/yf.npy", NpyBytes("<f4", {10}, std::string(40, '\0')));
  ExpectError(refused(x, folder + "/yf.npy"), absl::StatusCode::kInvalidArgument,
              {"dataset.targets " + folder + "/yf.npy", "dtype '<f4' is not supported here (expected i8, i4)"});
  WriteFile(folder + "/text.npy", "label,x\n1,2\n");
  ExpectError(refused(folder + "/text.npy", y), absl::StatusCode::kInvalidArgument,
              {folder + "/text.npy", "not a .npy file"});
  WriteFile(folder + "/flat.npy", NpyBytes("<f4", {10}, std::string(40, '\0')));
  ExpectError(refused(folder + "/flat.npy", y), absl::StatusCode::kInvalidArgument,
              {folder + "/flat.npy", "shape (10)"});
  WriteFile(folder + "/y2.npy", NpyBytes("<i8", {5, 2}, RawBytes(std::vector<int64_t>(10, 1))));
  ExpectError(refused(x, folder + "/y2.npy"), absl::StatusCode::kInvalidArgument,
              {folder + "/y2.npy", "shape (5, 2)", "one-dimensional"});
  WriteFile(folder + "/y9.npy", NpyBytes("<i8", {9}, RawBytes(std::vector<int64_t>(9, 1))));
  ExpectError(refused(x, folder + "/y9.npy"), absl::StatusCode::kInvalidArgument, {"has 10 rows but", "has 9"});
  std::vector<int64_t> negative(10, 1);
  negative[3] = -1;
  WriteFile(folder + "/yneg.npy", NpyBytes("<i8", {10}, RawBytes(negative)));
  ExpectError(refused(x, folder + "/yneg.npy"), absl::StatusCode::kInvalidArgument,
              {folder + "/yneg.npy", "target -1 at row 3"});
  v1::DatasetSpec capped = NpySpec(x, y);
  capped.set_num_classes(2);
  std::vector<int64_t> big(10, 1);
  big[9] = 2;  // in the validation split (the last 10%)
  WriteFile(folder + "/ybig.npy", NpyBytes("<i8", {10}, RawBytes(big)));
  capped.set_targets(folder + "/ybig.npy");
  ASSERT_TRUE(LoadDataset(capped, true, 0).ok());
  ExpectError(LoadDataset(capped, false, 0).status(), absl::StatusCode::kInvalidArgument,
              {"target 2 at row 9 is outside [0, 2)"});

  // Targets are scanned in chunks of 2^20 rows: a bad one in the second is found at its own row.
  const int64_t many = 1'200'000;
  std::vector<int64_t> labels(many, 0);
  labels[1'050'000] = -4;
  WriteFile(folder + "/many_x.npy", NpyBytes("|u1", {many, 1}, std::string(many, '\0')));
  WriteFile(folder + "/many_y.npy", NpyBytes("<i8", {many}, RawBytes(labels)));
  v1::DatasetSpec chunked = NpySpec(folder + "/many_x.npy", folder + "/many_y.npy");
  chunked.set_num_classes(3);
  ExpectError(LoadDataset(chunked, true, 0).status(), absl::StatusCode::kInvalidArgument,
              {"target -4 at row 1050000 is outside [0, 3)"});
}

}  // namespace
}  // namespace herd
