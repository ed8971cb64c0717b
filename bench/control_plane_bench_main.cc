// Control-plane scale benchmark: a real herd-coordinator process (its state
// in SQLite, or in a local etcd member with --store etcd), N simulated
// workers registering and heartbeating at 1 Hz each, and one job whose
// members rendezvous through JoinGeneration. Prints a summary, each figure
// with its target, and ends with one JSON line.
//   bazel run //bench:control_plane_bench -- [--workers 2000] [--job-workers 256] [--store sqlite|etcd] ...
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_format.h"
#include "bench/bench_env.h"
#include "bench/coordinator_process.h"
#include "bench/heartbeat_load.h"
#include "bench/herd_binary.h"
#include "bench/rendezvous_probe.h"
#include "bench/stats.h"
#include "common/rpc_options.h"
#include "coordinator/etcd/local_etcd.h"

namespace herd::bench {
namespace {

// The targets the control plane is held to (docs/design.md): at 10,000
// workers, heartbeats answer within these, also while a 1000-worker
// rendezvous runs, and that rendezvous completes within kRendezvousTargetMs.
constexpr double kHeartbeatP99TargetMs = 20;
constexpr double kRendezvousTargetMs = 300;

struct Flags {
  std::string coordinator;
  std::string store = "sqlite";
  int workers = 2000;
  int job_workers = 256;
  double period_s = 1.0;
  double warmup_s = 5;
  double duration_s = 20;
  double after_s = 3;
  int client_threads = 4;
  int channels = 4;
  int join_channels = 4;
  int register_threads = 8;
  double lease_seconds = 10;
  bool keep_dir = false;
  std::string samples_file;
};

// `first`: the first channel's number; channels of different numbers never
// share a connection.
std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const std::string& address, int count, int first = 0) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = first; i < first + count; ++i) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    args.SetMaxSendMessageSize(kMaxMessageBytes);
    args.SetInt("herd.bench.channel", i);  // distinct arguments: a connection of its own
    channels.push_back(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  return channels;
}

std::string WorkerId(int i) { return absl::StrFormat("w-%05d", i); }  // id order = number order

// Registers every worker with blocking calls from a few threads; seconds taken.
absl::StatusOr<double> RegisterAll(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                   const std::vector<std::string>& ids, int threads) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> failures{0};
  std::string first_error;
  std::mutex error_mu;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto stub = v1::ClusterService::NewStub(channels[t % channels.size()]);
      for (size_t i = t; i < ids.size(); i += threads) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        v1::RegisterWorkerRequest request;
        request.set_worker_id(ids[i]);
        request.set_address("127.0.0.1");
        request.set_device_kind("cpu");
        request.set_device_count(1);
        v1::RegisterWorkerResponse response;
        grpc::Status status = stub->RegisterWorker(&context, request, &response);
        if (!status.ok() && failures++ == 0) {
          std::lock_guard<std::mutex> lock(error_mu);
          first_error = status.error_message();
        }
      }
    });
  }
  for (auto& thread : pool) thread.join();
  if (failures > 0) {
    return absl::UnavailableError(absl::StrCat(failures.load(), " registrations failed, first: ", first_error));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Heartbeat figures over the samples sent in [from, to) seconds of the load.
nlohmann::json HeartbeatFigures(const std::vector<HeartbeatSample>& samples, double from, double to,
                                double expected_per_s) {
  std::vector<double> latency_ms;
  std::vector<double> lag_ms;
  int64_t sent = 0, failed = 0;
  for (const HeartbeatSample& s : samples) {
    if (s.sent_s < from || s.sent_s >= to) continue;
    ++sent;
    lag_ms.push_back(s.lag_s * 1e3);
    if (s.ok) {
      latency_ms.push_back(s.latency_s * 1e3);
    } else {
      ++failed;
    }
  }
  const double window = to - from;
  return {{"window_s", window},
          {"sent", sent},
          {"failed", failed},
          {"per_second", window > 0 ? latency_ms.size() / window : 0.0},
          {"expected_per_second", expected_per_s},
          {"p50_ms", Quantile(latency_ms, 0.5)},
          {"p99_ms", Quantile(latency_ms, 0.99)},
          {"max_ms", Quantile(latency_ms, 1.0)},
          {"send_lag_p99_ms", Quantile(lag_ms, 0.99)}};
}

void WriteSamples(const std::vector<HeartbeatSample>& samples, const std::string& path) {
  std::ofstream out(path);
  out << "sent_s,latency_s,lag_s,ok\n";
  for (const HeartbeatSample& s : samples) {
    out << s.sent_s << "," << s.latency_s << "," << s.lag_s << "," << s.ok << "\n";
  }
}

int64_t Rss(const CoordinatorProcess& process) { return process.RssKiB().value_or(-1); }

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"herd control-plane benchmark: simulated workers heartbeating a real herd-coordinator"};
  app.add_option("--coordinator", flags.coordinator, "herd-coordinator binary (default: from runfiles/bazel-bin)");
  app.add_option("--store", flags.store,
                 "where the coordinator keeps its state: sqlite (a database file) or etcd (one local etcd member, "
                 "/usr/bin/etcd)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sqlite", "etcd"}));
  app.add_option("--workers", flags.workers, "simulated workers")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--job-workers", flags.job_workers, "members of the rendezvous job (min = max)")
      ->capture_default_str();
  app.add_option("--period-seconds", flags.period_s, "heartbeat period per worker")->capture_default_str();
  app.add_option("--warmup-seconds", flags.warmup_s, "heartbeats before measuring")->capture_default_str();
  app.add_option("--duration-seconds", flags.duration_s, "measured steady heartbeat window")->capture_default_str();
  app.add_option("--after-seconds", flags.after_s, "heartbeats kept up after the rendezvous")->capture_default_str();
  app.add_option("--client-threads", flags.client_threads, "threads driving heartbeats")->capture_default_str();
  app.add_option("--channels", flags.channels, "gRPC channels (connections) shared by the workers")
      ->capture_default_str();
  app.add_option("--join-channels", flags.join_channels,
                 "gRPC channels the rendezvous's JoinGeneration calls use, apart from the heartbeats' (a member's "
                 "trainer calls over its own connection, not over its daemon's)")
      ->capture_default_str();
  app.add_option("--register-threads", flags.register_threads, "threads registering workers")->capture_default_str();
  app.add_option("--lease-seconds", flags.lease_seconds, "coordinator --lease-seconds")->capture_default_str();
  app.add_option("--samples-file", flags.samples_file, "write every heartbeat as CSV: sent_s,latency_s,lag_s,ok");
  app.add_flag("--keep-dir", flags.keep_dir, "keep the coordinator's state dir and log (path printed)");
  CLI11_PARSE(app, argc, argv);
  if (flags.job_workers > flags.workers) {
    std::cerr << "control_plane_bench: --job-workers exceeds --workers\n";
    return 2;
  }
  if (flags.coordinator.empty()) flags.coordinator = FindHerdBinary("coordinator/herd-coordinator", argv[0]);

  std::unique_ptr<coordinator::LocalEtcd> etcd;
  if (flags.store == "etcd") {
    if (!coordinator::LocalEtcd::Installed()) {
      std::cerr << "control_plane_bench: --store etcd needs " << coordinator::kEtcdBinary
                << " (Debian's etcd-server; scripts/setup.sh installs it)\n";
      return 1;
    }
    auto started = coordinator::LocalEtcd::Start(1);
    if (!started.ok()) {
      std::cerr << "control_plane_bench: starting etcd: " << started.status() << "\n";
      return 1;
    }
    etcd = *std::move(started);
  }

  nlohmann::json report = {{"benchmark", "control_plane"}, {"store", flags.store}, {"workers", flags.workers},
                           {"period_s", flags.period_s},   {"client_threads", flags.client_threads},
                           {"channels", flags.channels},   {"join_channels", flags.join_channels},
                           {"machine_before", MachineSnapshot()}};
  const std::string dir = MakeTempDir("control-plane-bench");
  CoordinatorProcessOptions options;
  options.binary = flags.coordinator;
  options.directory = dir;
  options.lease_seconds = flags.lease_seconds;
  if (etcd != nullptr) options.store = "etcd://" + etcd->endpoints().front();
  auto coordinator = CoordinatorProcess::Start(options);
  if (!coordinator.ok()) {
    std::cerr << "control_plane_bench: " << coordinator.status() << "\n";
    return 1;
  }
  CoordinatorProcess& process = **coordinator;
  nlohmann::json memory = {{"rss_kib_started", Rss(process)}};

  auto channels = MakeChannels(process.address(), flags.channels);
  std::vector<std::string> ids;
  for (int i = 0; i < flags.workers; ++i) ids.push_back(WorkerId(i));
  auto registered = RegisterAll(channels, ids, flags.register_threads);
  if (!registered.ok()) {
    std::cerr << "control_plane_bench: " << registered.status() << "\n";
    return 1;
  }
  report["register"] = {{"seconds", *registered}, {"per_second", flags.workers / *registered}};
  memory["rss_kib_registered"] = Rss(process);
  std::printf("registered %d workers in %.2f s (%.0f/s)\n", flags.workers, *registered, flags.workers / *registered);
  if (*registered > flags.lease_seconds) {
    // The first workers' leases ran out before their first heartbeat: the
    // coordinator rightly asks them to re-register, and the rendezvous
    // may not find its members.
    std::printf("WARNING: registering took longer than the lease (%.0f s): pass a longer --lease-seconds\n",
                flags.lease_seconds);
  }

  HeartbeatLoadOptions load_options;
  load_options.period_s = flags.period_s;
  load_options.threads = flags.client_threads;
  HeartbeatLoad load(channels, ids, load_options);
  load.Start();
  auto seconds_since_load = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - load.started()).count();
  };
  std::this_thread::sleep_for(std::chrono::duration<double>(flags.warmup_s + flags.duration_s));
  memory["rss_kib_heartbeating"] = Rss(process);

  const double rendezvous_at = seconds_since_load();
  // The scheduler picks the lowest ids.
  const std::vector<std::string> members(ids.begin(), ids.begin() + flags.job_workers);
  auto rendezvous = RunRendezvous(MakeChannels(process.address(), flags.join_channels, flags.channels), members,
                                  std::chrono::seconds(60));
  const double rendezvous_done = seconds_since_load();
  std::this_thread::sleep_for(std::chrono::duration<double>(flags.after_s));
  std::vector<HeartbeatSample> samples = load.Stop();
  if (!flags.samples_file.empty()) WriteSamples(samples, flags.samples_file);
  memory["rss_kib_end"] = Rss(process);
  memory["peak_rss_kib"] = process.PeakRssKiB().value_or(-1);
  if (!rendezvous.ok()) {
    std::cerr << "control_plane_bench: " << rendezvous.status() << "\n";
    return 1;
  }
  CheckRendezvousAnswers(*rendezvous, members.size());  // after every timed window

  const double expected = flags.workers / flags.period_s;
  report["heartbeat"] = HeartbeatFigures(samples, flags.warmup_s, flags.warmup_s + flags.duration_s, expected);
  report["heartbeat_around_rendezvous"] =
      HeartbeatFigures(samples, rendezvous_at, rendezvous_done + flags.after_s, expected);
  const RendezvousResult& r = *rendezvous;
  report["rendezvous"] = {{"members", flags.job_workers},
                          {"submit_ms", r.submit_s * 1e3},
                          {"all_joined_ms", r.all_joined_s * 1e3},
                          {"join_p50_ms", Quantile(r.join_s, 0.5) * 1e3},
                          {"join_p99_ms", Quantile(r.join_s, 0.99) * 1e3},
                          {"join_max_ms", Quantile(r.join_s, 1.0) * 1e3},
                          {"answers_parse_ms", r.parse_s * 1e3},
                          {"failed", r.failed},
                          {"first_error", r.first_error},
                          {"ranks_ok", r.ranks_ok}};
  auto stopped = process.Stop();
  memory["exit_code"] = stopped.ok() ? *stopped : -1;
  report["coordinator"] = memory;
  report["machine_after"] = MachineSnapshot();

  const nlohmann::json& hb = report["heartbeat"];
  const nlohmann::json& around = report["heartbeat_around_rendezvous"];
  const nlohmann::json& rv = report["rendezvous"];
  const bool heartbeat_met = hb["p99_ms"].get<double>() <= kHeartbeatP99TargetMs && hb["failed"].get<int64_t>() == 0 &&
                             hb["per_second"].get<double>() >= 0.98 * expected;
  const bool around_met =
      around["p99_ms"].get<double>() <= kHeartbeatP99TargetMs && around["failed"].get<int64_t>() == 0;
  const bool rendezvous_met = rv["all_joined_ms"].get<double>() <= kRendezvousTargetMs && r.ranks_ok;
  report["targets"] = {{"heartbeat_p99_ms_at_most", kHeartbeatP99TargetMs},
                       {"rendezvous_ms_at_most", kRendezvousTargetMs},
                       {"heartbeat_met", heartbeat_met},
                       {"heartbeat_around_rendezvous_met", around_met},
                       {"rendezvous_met", rendezvous_met}};

  std::printf("store: %s\n", flags.store.c_str());
  std::printf(
      "heartbeats: %.0f/s sustained of %.0f/s offered over %.0f s; latency p50 %.2f ms, p99 %.2f ms (target <= %.0f "
      "ms), max %.2f ms; %lld failed; client send lag p99 %.2f ms\n",
      hb["per_second"].get<double>(), expected, hb["window_s"].get<double>(), hb["p50_ms"].get<double>(),
      hb["p99_ms"].get<double>(), kHeartbeatP99TargetMs, hb["max_ms"].get<double>(),
      static_cast<long long>(hb["failed"].get<int64_t>()), hb["send_lag_p99_ms"].get<double>());
  std::printf(
      "heartbeats around the rendezvous: p50 %.2f ms, p99 %.2f ms (target <= %.0f ms), max %.2f ms; %lld failed\n",
      around["p50_ms"].get<double>(), around["p99_ms"].get<double>(), kHeartbeatP99TargetMs,
      around["max_ms"].get<double>(), static_cast<long long>(around["failed"].get<int64_t>()));
  std::printf(
      "rendezvous of %d workers: submit %.1f ms, submit -> all joined %.1f ms (target <= %.0f ms); JoinGeneration "
      "p50 %.1f ms, p99 %.1f ms; %d failed; ranks %s (answers parsed after the run: %.1f ms)\n",
      flags.job_workers, rv["submit_ms"].get<double>(), rv["all_joined_ms"].get<double>(), kRendezvousTargetMs,
      rv["join_p50_ms"].get<double>(), rv["join_p99_ms"].get<double>(), r.failed, r.ranks_ok ? "ok" : "WRONG",
      rv["answers_parse_ms"].get<double>());
  std::printf(
      "coordinator RSS: %lld KiB started, %lld KiB registered, %lld KiB heartbeating, %lld KiB end, peak %lld KiB\n",
      static_cast<long long>(memory["rss_kib_started"].get<int64_t>()),
      static_cast<long long>(memory["rss_kib_registered"].get<int64_t>()),
      static_cast<long long>(memory["rss_kib_heartbeating"].get<int64_t>()),
      static_cast<long long>(memory["rss_kib_end"].get<int64_t>()),
      static_cast<long long>(memory["peak_rss_kib"].get<int64_t>()));
  std::printf(
      "targets (set for 10,000 workers and a 1000-worker rendezvous; this run: %d and %d): heartbeat p99 <= %.0f ms: "
      "%s; also around the rendezvous: %s; rendezvous <= %.1f s: %s\n",
      flags.workers, flags.job_workers, kHeartbeatP99TargetMs, heartbeat_met ? "met" : "MISSED",
      around_met ? "met" : "MISSED", kRendezvousTargetMs / 1000, rendezvous_met ? "met" : "MISSED");
  if (flags.keep_dir) {
    std::printf("coordinator state and log kept in %s\n", dir.c_str());
  } else {
    std::filesystem::remove_all(dir);
  }
  std::printf("%s\n", report.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) { return herd::bench::Main(argc, argv); }
