// Sharded optimizer state (sync.shard_optimizer, ZeRO-1): optimizer-state
// bytes per rank with and without sharding for each world size, one process
// per rank over Gloo (loopback), with the trainer's own model, optimizer and
// OptimizerShards code, owning what the trainer's gradient reduce-scatter
// gives each rank. Also times the gradient sync of the trainer's buckets
// (all-reduce vs reduce-scatter), the parameter all-gather each step adds
// and the state gather each commit adds (median of --commits). Prints a table, ends with one JSON line.
//   bazel run //bench:optimizer_shard_bench -- [--ranks 1,2,3] [--model resnet_small] [--optimizer adam]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_env.h"
#include "bench/file_store.h"
#include "bench/fork_ranks.h"
#include "common/spec_enums.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/models/model.h"
#include "worker/train/sync/gradient_sync.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/optim/sharded_optimizer.h"

namespace herd::bench {
namespace {

struct Flags {
  std::vector<int> ranks = {1, 2, 3};
  std::string model = "resnet_small";
  std::string optimizer = "adam";
  std::vector<int64_t> sample_shape = {3, 32, 32};
  int64_t classes = 10;
  int steps = 5;
  int commits = 5;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

absl::StatusOr<nlohmann::json> RunRank(const Flags& flags, int world, int rank, const std::string& store_dir) {
  GlooOptions gloo;
  gloo.rank = rank;
  gloo.size = world;
  gloo.key_prefix = "shard/";
  auto comm = CreateGlooCommunicator(gloo, std::make_shared<FileStore>(store_dir));
  if (!comm.ok()) return comm.status();
  v1::ModelSpec model_spec;
  model_spec.set_name(flags.model);
  auto model = CreateModel(model_spec, ModelInputInfo{flags.sample_shape, flags.classes}, /*seed=*/1);
  if (!model.ok()) return model.status();
  auto optimizer_name = ParseSpecName<v1::OptimizerName>(flags.optimizer, "--optimizer");
  if (!optimizer_name.ok()) return optimizer_name.status();
  v1::OptimizerSpec optimizer_spec;
  optimizer_spec.set_name(*optimizer_name);
  optimizer_spec.set_lr(1e-3);
  optimizer_spec.set_momentum(*optimizer_name == v1::OPTIMIZER_NAME_SGD ? 0.9 : 0);
  optimizer_spec.set_beta1(0.9);
  optimizer_spec.set_beta2(0.999);
  optimizer_spec.set_eps(1e-8);
  const std::vector<torch::Tensor> params = (*model)->Parameters();
  auto optimizer = MakeOptimizer(optimizer_spec, params);
  if (!optimizer.ok()) return optimizer.status();
  // The trainer's buckets (default sizes): the plain run all-reduces them,
  // the sharded run reduce-scatters them and owns what their layout gives it.
  GradientSyncOptions plain_options;
  GradientSyncOptions scatter_options;
  scatter_options.reduce_scatter = true;
  GradientSync plain(params, comm->get(), plain_options);
  GradientSync scatter(params, comm->get(), scatter_options);
  auto shards = OptimizerShards::Create(params, comm->get(), scatter.scattered_pieces());
  if (!shards.ok()) return shards.status();

  double share_seconds = 0, allreduce_seconds = 0, reduce_scatter_seconds = 0;
  auto sync = [&](GradientSync& gradients, int step, double* seconds) {
    torch::manual_seed(step);  // the same gradient on every rank
    for (const auto& p : params) p.mutable_grad() = torch::randn_like(p);
    gradients.ArmForBackward();  // no backward: Finish launches every bucket from .grad
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = gradients.Finish();
    *seconds += Seconds(start);
    return status;
  };
  for (int step = 0; step < flags.steps; ++step) {
    if (auto s = sync(plain, step, &allreduce_seconds); !s.ok()) return s;
    if (auto s = sync(scatter, step, &reduce_scatter_seconds); !s.ok()) return s;
    if (auto s = (*shards)->StepOwnRange(**optimizer); !s.ok()) return s;
    const auto start = std::chrono::steady_clock::now();
    if (auto s = (*shards)->ShareParameters(); !s.ok()) return s;
    share_seconds += Seconds(start);
  }
  const int64_t sharded = OptimizerStateBytes(**optimizer);
  // Each commit point gathers the whole state, and the next step drops the
  // foreign part again; the median of several is steadier on a loaded machine.
  std::vector<double> gather_ms;
  int64_t whole = 0;  // what every rank holds without sharding
  for (int commit = 0; commit < flags.commits; ++commit) {
    (*shards)->DropForeignState(**optimizer);
    const auto start = std::chrono::steady_clock::now();
    if (auto s = (*shards)->GatherState(**optimizer); !s.ok()) return s;
    gather_ms.push_back(1e3 * Seconds(start));
    whole = OptimizerStateBytes(**optimizer);
  }
  std::sort(gather_ms.begin(), gather_ms.end());
  return nlohmann::json{{"rank", rank},
                        {"parameter_bytes", (*shards)->total_bytes()},
                        {"owned_parameter_bytes", (*shards)->owned_bytes()},
                        {"state_bytes_sharded", sharded},
                        {"state_bytes_unsharded", whole},
                        {"parameter_allgather_ms_per_step", 1e3 * share_seconds / flags.steps},
                        {"gradient_allreduce_ms_per_step", 1e3 * allreduce_seconds / flags.steps},
                        {"gradient_reduce_scatter_ms_per_step", 1e3 * reduce_scatter_seconds / flags.steps},
                        // SyncTraffic's count: an all-reduce counts its buffer, a reduce-scatter or
                        // all-gather half of it.
                        {"allreduce_wire_bytes_per_step", plain.last_stats().wire_bytes},
                        {"sharded_wire_bytes_per_step",
                         scatter.last_stats().wire_bytes + (*shards)->share_wire_bytes()},
                        {"state_gather_ms_per_commit", gather_ms[gather_ms.size() / 2]}};
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"herd sharded optimizer state (ZeRO-1): optimizer-state bytes per rank"};
  app.add_option("--ranks", flags.ranks, "world sizes, e.g. 1,2,3")->delimiter(',')->capture_default_str();
  app.add_option("--model", flags.model, "model.name (mlp, mnist_cnn, resnet_small, char_transformer)")
      ->capture_default_str();
  app.add_option("--sample-shape", flags.sample_shape, "the model's input sample shape, e.g. 3,32,32")
      ->delimiter(',');
  app.add_option("--classes", flags.classes, "classes (vocabulary for char_transformer)")->capture_default_str();
  app.add_option("--optimizer", flags.optimizer, "sgd (momentum 0.9), adam or adamw")->capture_default_str();
  app.add_option("--steps", flags.steps, "optimizer steps before measuring")->capture_default_str();
  app.add_option("--commits", flags.commits, "commit-point state gathers timed (median printed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::string dir = std::filesystem::temp_directory_path() / absl::StrCat("herd-shard-bench-", getpid());
  nlohmann::json worlds = nlohmann::json::array();
  int failures = 0;
  std::printf("%s, %s: optimizer-state bytes per rank\n", flags.model.c_str(), flags.optimizer.c_str());
  std::printf("%5s %5s %14s %14s %7s %10s %16s %16s\n", "W", "rank", "unsharded", "sharded", "ratio", "x W",
              "allgather ms/st", "gather ms/commit");
  for (int world : flags.ranks) {
    const std::string world_dir = absl::StrCat(dir, "/w", world);
    std::filesystem::create_directories(world_dir + "/store");
    auto rank_file = [&](int rank) { return absl::StrCat(world_dir, "/rank", rank, ".json"); };
    absl::Status status = RunRankProcesses(world, [&](int rank) {
      auto result = RunRank(flags, world, rank, world_dir + "/store");
      if (!result.ok()) {
        std::fprintf(stderr, "W=%d rank %d: %s\n", world, rank, result.status().ToString().c_str());
        return 1;
      }
      std::ofstream(rank_file(rank)) << result->dump() << "\n";
      return 0;
    });
    nlohmann::json ranks = nlohmann::json::array();
    if (status.ok()) {
      for (int rank = 0; rank < world; ++rank) {
        std::ifstream in(rank_file(rank));
        nlohmann::json r = nlohmann::json::parse(in);
        const double ratio = r["state_bytes_sharded"].get<double>() / r["state_bytes_unsharded"].get<double>();
        r["ratio"] = ratio;
        std::printf("%5d %5d %14lld %14lld %7.3f %10.3f %16.3f %16.3f\n", world, rank,
                    static_cast<long long>(r["state_bytes_unsharded"].get<int64_t>()),
                    static_cast<long long>(r["state_bytes_sharded"].get<int64_t>()), ratio, ratio * world,
                    r["parameter_allgather_ms_per_step"].get<double>(), r["state_gather_ms_per_commit"].get<double>());
        std::printf("%5s %5s gradients: all-reduce %.3f ms, reduce-scatter %.3f ms per step; wire bytes per "
                    "step plain %lld, sharded %lld (reduce-scatter + parameter all-gather)\n",
                    "", "", r["gradient_allreduce_ms_per_step"].get<double>(),
                    r["gradient_reduce_scatter_ms_per_step"].get<double>(),
                    static_cast<long long>(r["allreduce_wire_bytes_per_step"].get<int64_t>()),
                    static_cast<long long>(r["sharded_wire_bytes_per_step"].get<int64_t>()));
        ranks.push_back(r);
      }
    } else {
      ++failures;
      std::printf("%5d failed: %s\n", world, status.ToString().c_str());
    }
    worlds.push_back({{"world", world}, {"ranks", ranks}, {"error", status.ok() ? "" : status.ToString()}});
  }
  std::filesystem::remove_all(dir);
  nlohmann::json out{{"bench", "optimizer_shard"}, {"model", flags.model}, {"optimizer", flags.optimizer},
                     {"worlds", worlds}, {"machine", MachineSnapshot()}};
  std::printf("%s\n", out.dump().c_str());
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) { return herd::bench::Main(argc, argv); }
