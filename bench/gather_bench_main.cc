// Batch gathers from memory-mapped files against the same data in memory:
// Dataset::Get's time per batch, nothing else. In-memory sides: `idx` (an
// IDX set decoded to float once) and `text` (bytes read into a tensor).
// Mapped sides: `npy` (the same images as uint8 and as float32 .npy files)
// and `tokens` (the same bytes as uint16 ids). Both sides of a pair gather
// the same random batches; "hot" is after one pass over every sample (page
// cache and page tables warm), "first" a fresh mapping's first pass (page
// cache warm, page tables not: a minor fault per page first touched).
//
// Usage: gather_bench [--rows 60000] [--batch 64] [--batches 2000] [--text-mib 8] [--seq 64]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include <ATen/Parallel.h>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "worker/data/dataset.h"
#include "worker/data/testing/idx_test_files.h"
#include "worker/data/testing/npy_test_files.h"

namespace herd {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Dataset> Load(const v1::DatasetSpec& spec) {
  auto set = LoadDataset(spec, /*train=*/true, 0);
  if (!set.ok()) {
    std::cerr << set.status() << "\n";
    std::exit(1);
  }
  return std::move(*set);
}

std::vector<std::vector<int64_t>> RandomBatches(int64_t size, int batch, int count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> pick(0, size - 1);
  std::vector<std::vector<int64_t>> batches(count, std::vector<int64_t>(batch));
  for (auto& b : batches) {
    for (auto& i : b) i = pick(random);
  }
  return batches;
}

// Median microseconds per Get over `batches`.
double MedianMicros(const Dataset& set, const std::vector<std::vector<int64_t>>& batches) {
  std::vector<double> times;
  for (const auto& b : batches) {
    const auto start = Clock::now();
    Batch batch = set.Get(b);
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// Microseconds per Get for one pass over every sample in batches, on `set`
// as it is (first: a fresh mapping).
double PassMicros(const Dataset& set, int batch) {
  std::vector<int64_t> order(set.size());
  for (int64_t i = 0; i < set.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  const auto start = Clock::now();
  int64_t count = 0;
  for (size_t at = 0; at + batch <= order.size(); at += batch, ++count) {
    set.Get(std::vector<int64_t>(order.begin() + at, order.begin() + at + batch));
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / std::max<int64_t>(count, 1);
}

}  // namespace
}  // namespace herd

int main(int argc, char** argv) {
  using namespace herd;
  CLI::App app{"Dataset::Get per batch: memory-mapped npy/tokens against in-memory idx/text"};
  int rows = 60000, batch = 64, batches = 2000, text_mib = 8, seq = 64;
  app.add_option("--rows", rows, "images (28x28) in the image sets");
  app.add_option("--batch", batch, "samples per Get");
  app.add_option("--batches", batches, "timed Gets per side");
  app.add_option("--text-mib", text_mib, "MiB of text / tokens");
  app.add_option("--seq", seq, "sequence_length of the text / tokens sets");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(1);  // as a trainer with threads: 1

  const std::string dir = MakeTempFolder("gather_bench");
  std::mt19937 random(1);
  std::vector<uint8_t> pixels(static_cast<size_t>(rows) * 784), labels(rows);
  for (auto& p : pixels) p = static_cast<uint8_t>(random());
  for (auto& l : labels) l = static_cast<uint8_t>(random() % 10);
  WriteRawFile(dir + "/train-images-idx3-ubyte", IdxBytes({uint32_t(rows), 28, 28}, pixels));
  WriteRawFile(dir + "/train-labels-idx1-ubyte", IdxBytes({uint32_t(rows)}, labels));
  std::vector<float> floats(pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) floats[i] = static_cast<float>(pixels[i]) / 255.0f;
  std::vector<int64_t> targets(labels.begin(), labels.end());
  WriteFile(dir + "/x_u8.npy", NpyBytes("|u1", {rows, 1, 28, 28}, RawBytes(pixels)));
  WriteFile(dir + "/x_f32.npy", NpyBytes("<f4", {rows, 1, 28, 28}, RawBytes(floats)));
  WriteFile(dir + "/y.npy", NpyBytes("<i8", {rows}, RawBytes(targets)));
  std::string text(static_cast<size_t>(text_mib) << 20, '\0');
  for (auto& c : text) c = static_cast<char>(random());
  WriteFile(dir + "/text.txt", text);
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<uint8_t>(text[i]);
  WriteFile(dir + "/tokens.bin", RawBytes(tokens));

  v1::DatasetSpec idx, npy_u8, npy_f32, text_spec, token_spec;
  idx.set_kind(v1::DATASET_KIND_IDX);
  idx.set_path(dir);
  for (auto* spec : {&npy_u8, &npy_f32}) {
    spec->set_kind(v1::DATASET_KIND_NPY);
    spec->set_targets(dir + "/y.npy");
    spec->set_validation_targets(dir + "/y.npy");  // all rows train, as idx's train files
  }
  npy_u8.set_inputs(dir + "/x_u8.npy");
  npy_u8.set_validation_inputs(dir + "/x_u8.npy");
  npy_f32.set_inputs(dir + "/x_f32.npy");
  npy_f32.set_validation_inputs(dir + "/x_f32.npy");
  text_spec.set_kind(v1::DATASET_KIND_TEXT);
  text_spec.set_path(dir + "/text.txt");
  text_spec.set_sequence_length(seq);
  token_spec.set_kind(v1::DATASET_KIND_TOKENS);
  token_spec.set_path(dir + "/tokens.bin");
  token_spec.set_sequence_length(seq);
  token_spec.set_vocab_size(256);
  token_spec.set_dtype(v1::TOKEN_DTYPE_UINT16);

  nlohmann::json report;
  for (const auto& [name, spec] : std::vector<std::pair<std::string, v1::DatasetSpec>>{
           {"idx (memory)", idx}, {"npy uint8 (mapped)", npy_u8}, {"npy float32 (mapped)", npy_f32},
           {"text (memory)", text_spec}, {"tokens uint16 (mapped)", token_spec}}) {
    auto set = Load(spec);
    const double first = PassMicros(*set, batch);
    const double hot = MedianMicros(*set, RandomBatches(set->size(), batch, batches, 3));
    report[name] = {{"hot_us_per_batch", hot}, {"first_pass_us_per_batch", first}, {"samples", set->size()}};
    std::printf("%-24s hot %8.1f us/batch   first pass %8.1f us/batch   (%lld samples)\n", name.c_str(), hot, first,
                static_cast<long long>(set->size()));
  }
  std::filesystem::remove_all(dir);
  std::cout << report.dump() << "\n";
  return 0;
}
