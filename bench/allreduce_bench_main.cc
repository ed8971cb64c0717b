// All-reduce micro-benchmark: herd's Gloo Communicator against Gloo's own
// ring all-reduce called directly and a plain TCP socket pump, one process per
// rank over loopback. Prints a table per world size and ends with one JSON line.
//   bazel run //bench:allreduce_bench -- [--ranks 2,4] [--max-bytes 268435456] ...
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "bench/allreduce_rank.h"
#include "bench/allreduce_report.h"
#include "bench/bench_env.h"
#include "bench/fork_ranks.h"

namespace herd::bench {
namespace {

struct Flags {
  std::vector<int> ranks = {2, 4};
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 256 << 20;
  int step = 4;               // sizes go up by this factor
  std::vector<size_t> sizes;  // when given, exactly these (bytes)
  size_t headline_bytes = 64 << 20;
  double timeout_seconds = 60;
  bool keep_files = false;
  AllreduceCaseOptions cases;
};

std::vector<size_t> Sizes(const Flags& flags) {
  std::vector<size_t> sizes;
  if (!flags.sizes.empty()) {
    for (size_t bytes : flags.sizes) sizes.push_back(std::max<size_t>(bytes / 4 * 4, 4));
    return sizes;
  }
  for (size_t bytes = flags.min_bytes; bytes <= flags.max_bytes; bytes *= std::max(flags.step, 2)) {
    sizes.push_back(bytes / 4 * 4);
  }
  return sizes;
}

// One world size; a failed rank ends the world (its peers' collectives can
// only fail after it), but what every rank finished is still summarized, with
// the failure under "error".
nlohmann::json RunWorld(const Flags& flags, int world, const std::string& dir) {
  const std::string store = dir + "/store";
  std::filesystem::create_directories(store);
  auto rank_file = [&](int rank) { return dir + "/rank" + std::to_string(rank) + ".json"; };
  absl::Status status = RunRankProcesses(world, [&](int rank) {
    absl::Status s = RunAllreduceRank(flags.cases, world, rank, store, rank_file(rank));
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return s.ok() ? 0 : 1;
  });
  std::vector<nlohmann::json> results;
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(rank_file(rank));
    nlohmann::json result = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    results.push_back(result.is_object() ? result : nlohmann::json{{"rank", rank}, {"cases", nlohmann::json::array()}});
  }
  nlohmann::json summary = SummarizeWorld(world, results);
  if (!status.ok()) summary["error"] = status.ToString();
  return summary;
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"herd all-reduce benchmark: herd vs direct Gloo vs a TCP loopback pump"};
  app.add_option("--ranks", flags.ranks, "world sizes to run, e.g. 2,4")->delimiter(',')->capture_default_str();
  app.add_option("--min-bytes", flags.min_bytes, "smallest message")->capture_default_str();
  app.add_option("--max-bytes", flags.max_bytes, "largest message")->capture_default_str();
  app.add_option("--step", flags.step, "size factor between messages")->capture_default_str();
  app.add_option("--sizes", flags.sizes, "exact message sizes in bytes, e.g. 4096,4194308 (overrides min/max/step)")
      ->delimiter(',');
  app.add_option("--headline-bytes", flags.headline_bytes, "size of the headline figures (else the largest run)")
      ->capture_default_str();
  app.add_option("--iterations", flags.cases.iterations, "timed samples per case, at most")->capture_default_str();
  app.add_option("--min-iterations", flags.cases.min_iterations, "timed samples per case, at least")
      ->capture_default_str();
  app.add_option("--warmup", flags.cases.warmup, "untimed batches per case")->capture_default_str();
  app.add_option("--max-batch", flags.cases.max_batch, "most ops per timed sample (small sizes are batched)")
      ->capture_default_str();
  app.add_option("--max-case-seconds", flags.cases.max_case_seconds, "time budget per case (caps iterations)")
      ->capture_default_str();
  app.add_option("--variants", flags.cases.variants,
                 "any of tcp_pump,herd,gloo_ring,gloo_ring_chunked,herd_shm (herd as trainers on one host run it: "
                 "shared memory in front of Gloo), herd_tcp (the TCP mesh, herd's own authenticated transport, "
                 "--data-plane=tcp), herd_f16 and herd_tcp_f16 (the same summing float16), gloo_ring@BYTES (the direct ring with that max "
                 "segment), gloo_ring_xK[@BYTES] (K direct rings at once on K connections per peer)")
      ->delimiter(',');
  app.add_option("--gloo-segment-bytes", flags.cases.gloo_segment_bytes,
                 "max segment of the direct gloo_ring call (0: Gloo's default, 1 MiB)")
      ->capture_default_str();
  app.add_option("--timeout-seconds", flags.timeout_seconds, "rendezvous and per-op timeout")->capture_default_str();
  app.add_flag("--keep-files", flags.keep_files, "keep the per-rank sample files (path printed)");
  CLI11_PARSE(app, argc, argv);
  flags.cases.sizes = Sizes(flags);
  flags.cases.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_seconds * 1000));
  if (flags.cases.sizes.empty() || flags.ranks.empty()) {
    std::cerr << "allreduce_bench: nothing to run\n";
    return 2;
  }

  const std::string dir = MakeTempDir("allreduce-bench");
  if (dir.empty()) {
    std::cerr << "allreduce_bench: cannot create a temporary directory\n";
    return 1;
  }
  nlohmann::json report = {{"benchmark", "allreduce"}, {"dtype", "float32"}, {"machine_before", MachineSnapshot()}};
  report["worlds"] = nlohmann::json::array();
  bool failed = false;
  for (int world : flags.ranks) {
    nlohmann::json summary = RunWorld(flags, world, dir + "/world" + std::to_string(world));
    PrintWorldTable(summary, stdout);
    if (summary.contains("error")) {
      std::printf("%d ranks FAILED (figures above are the sizes finished before): %s\n", world,
                  summary["error"].get<std::string>().c_str());
      failed = true;
    }
    report["worlds"].push_back(summary);
  }
  report["machine_after"] = MachineSnapshot();

  size_t headline_bytes = flags.cases.sizes.back();
  for (size_t bytes : flags.cases.sizes) {
    if (bytes == flags.headline_bytes) headline_bytes = bytes;
  }
  report["headline"] = nlohmann::json::array();
  for (const nlohmann::json& world : report["worlds"]) report["headline"].push_back(Headline(world, headline_bytes));
  // The targets (bench/README.md), checked on the first world size run (2 ranks by default).
  const nlohmann::json& first = report["headline"].front();
  report["targets"] = {{"ranks", first.value("ranks", 0)},
                       {"bytes", headline_bytes},
                       {"herd_over_pump_at_least", 0.5},
                       {"herd_over_gloo_at_least", 1.0},
                       {"pump_met", first.value("herd_over_pump", 0.0) >= 0.5},
                       {"gloo_met", first.value("herd_over_gloo", 0.0) >= 1.0}};
  std::printf(
      "\nheadline at %zu KiB, %d ranks: herd busbw %.3f GB/s, direct gloo %.3f GB/s, tcp pump %.3f GB/s; "
      "herd/pump %.2f (target >= 0.5), herd/gloo %.2f (target >= 1.0)\n",
      headline_bytes >> 10, first.value("ranks", 0), first.value("herd_busbw_gbps", 0.0),
      first.value("gloo_busbw_gbps", 0.0), first.value("pump_gbps", 0.0), first.value("herd_over_pump", 0.0),
      first.value("herd_over_gloo", 0.0));
  if (first.value("herd_shm_busbw_gbps", 0.0) > 0) {
    std::printf("herd on one host (herd_shm, summed in shared memory): busbw %.3f GB/s, %.2f x the tcp pump\n",
                first.value("herd_shm_busbw_gbps", 0.0), first.value("herd_shm_over_pump", 0.0));
  }
  if (flags.keep_files) {
    std::printf("samples kept in %s\n", dir.c_str());
  } else {
    std::filesystem::remove_all(dir);
  }
  std::printf("%s\n", report.dump().c_str());
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) { return herd::bench::Main(argc, argv); }
