// Checkpoints off the step loop: how long a save holds the step loop up with
// the background writer (worker/train/checkpoint/checkpoint_writer.h: a host copy of
// the state, then files and record on the writer's thread) against writing
// the same checkpoint synchronously on the step loop as trainers did before
// (SerializeTrainingState, then WriteCheckpointFolder: fsync'd files,
// MANIFEST, rename). A real mlp and optimizer train between saves; the
// steps that run while a write is under way are timed too, since the writer
// competes with them for CPU and memory bandwidth. Prints a table, ends with
// one JSON line.
//   bazel run -c opt //bench:checkpoint_stall_bench -- [--hidden 2048,2048,2048] [--optimizer adam] [--saves 5]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_env.h"
#include "common/spec_enums.h"
#include "worker/models/model.h"
#include "worker/train/checkpoint/checkpoint_files.h"
#include "worker/train/checkpoint/checkpoint_writer.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/checkpoint/training_state.h"

namespace herd::bench {
namespace {

struct Flags {
  std::vector<int64_t> hidden = {2048, 2048, 2048};
  int64_t features = 1024;
  int64_t classes = 10;
  int64_t batch = 32;
  std::string optimizer = "adam";
  int saves = 5;
  std::string dir;  // default: $TEST_TMPDIR or /tmp
};

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

int Run(const Flags& flags) {
  v1::ModelSpec model_spec;
  model_spec.set_name("mlp");
  for (int64_t h : flags.hidden) model_spec.add_hidden(h);
  auto model = CreateModel(model_spec, ModelInputInfo{{flags.features}, flags.classes}, /*seed=*/1);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  auto optimizer_name = ParseSpecName<v1::OptimizerName>(flags.optimizer, "--optimizer");
  if (!optimizer_name.ok()) {
    std::fprintf(stderr, "%s\n", std::string(optimizer_name.status().message()).c_str());
    return 1;
  }
  v1::OptimizerSpec optimizer_spec;
  optimizer_spec.set_name(*optimizer_name);
  optimizer_spec.set_lr(1e-4);
  optimizer_spec.set_momentum(*optimizer_name == v1::OPTIMIZER_NAME_SGD ? 0.9 : 0);
  optimizer_spec.set_beta1(0.9);
  optimizer_spec.set_beta2(0.999);
  optimizer_spec.set_eps(1e-8);
  auto optimizer = MakeOptimizer(optimizer_spec, (*model)->Parameters());
  if (!optimizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(optimizer.status().message()).c_str());
    return 1;
  }
  torch::manual_seed(1);
  Batch batch{torch::randn({flags.batch, flags.features}), torch::randint(0, flags.classes, {flags.batch})};
  auto step = [&] {
    const auto start = Clock::now();
    (*optimizer)->zero_grad();
    (*model)->Forward(batch).loss.backward();
    (*optimizer)->step();
    return Seconds(start);
  };

  const std::string root = flags.dir.empty() ? MakeTempDir("checkpoint_stall_bench")
                                              : absl::StrCat(flags.dir, "/checkpoint_stall_bench-", getpid());
  std::error_code made;
  if (root.empty() || (std::filesystem::create_directories(root, made), made)) {
    std::fprintf(stderr, "cannot make a folder for the checkpoints\n");
    return 1;
  }

  // Warm up (optimizer state allocated), then the idle step time.
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> idle_steps;
  for (int i = 0; i < 5; ++i) idle_steps.push_back(step());

  // Synchronous: the whole write on the step loop.
  int64_t state_bytes = 0;
  std::vector<double> sync_seconds;
  for (int i = 0; i < flags.saves; ++i) {
    step();
    const auto start = Clock::now();
    auto files = SerializeTrainingState(model->get(), optimizer->get(), {i, 0, 0});
    if (!files.ok()) return std::fprintf(stderr, "%s\n", files.status().ToString().c_str()), 1;
    auto folder = WriteCheckpointFolder(root, "sync", i, *files);
    if (!folder.ok()) return std::fprintf(stderr, "%s\n", folder.status().ToString().c_str()), 1;
    sync_seconds.push_back(Seconds(start));
    state_bytes = folder->size_bytes;
    (void)DeleteCheckpointFolder(root, folder->relative_path);  // each write to an empty folder
  }

  // Off the step loop: only Save() (the host copy) holds the loop; training
  // goes on while the writer writes.
  CheckpointWriterOptions options;
  options.root = root;
  options.job_id = "async";
  options.make_optimizer = [optimizer_spec](std::vector<torch::Tensor> params) {
    return MakeOptimizer(optimizer_spec, std::move(params));
  };
  CheckpointWriter writer(options);
  std::vector<double> stall_seconds, write_seconds, busy_steps;
  std::string last_path;
  for (int i = 0; i < flags.saves; ++i) {
    step();
    const auto start = Clock::now();
    if (auto s = writer.Save(model->get(), optimizer->get(), {i, 0, 0}, {}, 1, 1e-4); !s.ok()) {
      return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    }
    stall_seconds.push_back(Seconds(start));
    // Train on until the write is done.
    std::vector<CheckpointOutcome> done;
    while (done.empty()) {
      busy_steps.push_back(step());
      done = writer.TakeFinished();
    }
    write_seconds.push_back(Seconds(start));
    if (!done[0].status.ok()) return std::fprintf(stderr, "%s\n", done[0].status.ToString().c_str()), 1;
    if (!last_path.empty()) (void)DeleteCheckpointFolder(root, last_path);
    last_path = done[0].folder.relative_path;
  }
  // What the writer wrote restores.
  auto files = ReadCheckpointFolder(root, last_path);
  const bool verified = files.ok();
  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);

  const double sync = Median(sync_seconds), stall = Median(stall_seconds);
  std::printf("state: %.1f MB (mlp %s, %s), %d saves each way, to %s\n", state_bytes / 1e6,
              absl::StrJoin(flags.hidden, "-").c_str(), flags.optimizer.c_str(), flags.saves, root.c_str());
  std::printf("  synchronous write on the step loop   %8.4f s (median)\n", sync);
  std::printf("  step-loop stall with the writer      %8.4f s (median), %.1f%% of the synchronous write\n", stall,
              100 * stall / sync);
  std::printf("  background write, save to recorded   %8.4f s (median)\n", Median(write_seconds));
  std::printf("  step time idle / during a write      %8.4f / %.4f s (mean, %zu steps)\n", Mean(idle_steps),
              Mean(busy_steps), busy_steps.size());
  nlohmann::json report = {{"state_bytes", state_bytes},
                           {"saves", flags.saves},
                           {"sync_write_seconds", sync},
                           {"stall_seconds", stall},
                           {"stall_fraction", stall / sync},
                           {"background_write_seconds", Median(write_seconds)},
                           {"step_seconds_idle", Mean(idle_steps)},
                           {"step_seconds_during_write", Mean(busy_steps)},
                           {"verified", verified},
                           {"machine", MachineSnapshot()}};
  std::printf("%s\n", report.dump().c_str());
  return verified ? 0 : 1;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) {
  herd::bench::Flags flags;
  CLI::App app{"checkpoint_stall_bench: step-loop stall per checkpoint, background writer vs synchronous write"};
  app.add_option("--hidden", flags.hidden, "mlp hidden widths")->delimiter(',')->capture_default_str();
  app.add_option("--features", flags.features, "input features")->capture_default_str();
  app.add_option("--batch", flags.batch, "batch size of the steps between saves")->capture_default_str();
  app.add_option("--optimizer", flags.optimizer, "sgd, adam or adamw")->capture_default_str();
  app.add_option("--saves", flags.saves, "saves timed each way")->capture_default_str();
  app.add_option("--dir", flags.dir, "where checkpoints go (default $TEST_TMPDIR or /tmp)");
  CLI11_PARSE(app, argc, argv);
  return herd::bench::Run(flags);
}
