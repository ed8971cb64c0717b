// herd-trainer: one job's training process, started by herd-worker. It joins
// the job's current generation at the coordinator and trains until done,
// carrying on through later generations when peers fail or join.
#include <glog/logging.h>
#include <prometheus/registry.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/auth.h"
#include "common/rpc_options.h"
#include "worker/train/cluster_client.h"
#include "worker/train/metrics_snapshot.h"
#include "worker/train/metrics_snapshot_writer.h"
#include "worker/train/generation_loop.h"
#include "worker/train/liveness.h"
#include "worker/train/sample_ledger.h"
#include "worker/train/trainer.h"
#include "worker/train/trainer_metrics.h"

namespace {

// The daemon reads this file and reports it as the job's failure reason.
void WriteTerminationMessage(const std::string& path, const std::string& message) {
  if (path.empty()) return;
  std::ofstream(path, std::ios::trunc) << message << "\n";
}

// A trainer whose daemon died would hold a rank nobody supervises: leave
// with it (the daemon's lease expiry then evicts the worker).
void ExitWithParent() {
  const pid_t parent = getppid();
  std::thread([parent] {
    while (getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    LOG(ERROR) << "the worker daemon (pid " << parent << ") is gone; exiting";
    _exit(1);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"herd-trainer: runs one job's training steps (started by herd-worker, not by hand)"};
  std::string coordinator = "127.0.0.1:7070", job, worker_id, work_dir, token_file, termination_file;
  std::string device = "cpu", tls_ca, tls_cert, tls_key;
  bool insecure = false;
  int gpu = -1;
  double join_timeout = 300, collective_timeout = 0;
  app.add_option("--coordinator", coordinator, "coordinator address host:port")->capture_default_str();
  app.add_option("--job", job, "job id")->required();
  app.add_option("--worker-id", worker_id, "this worker's id")->required();
  app.add_option("--work-dir", work_dir, "this job's folder on the worker")->required();
  app.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--gpu", gpu, "GPU index for device cuda");
  app.add_option("--token-file", token_file, "bearer token file");
  app.add_flag("--insecure-no-auth", insecure, "call the coordinator without a token");
  app.add_option("--tls-ca", tls_ca, "CA certificate to verify the coordinator");
  app.add_option("--tls-cert", tls_cert, "client certificate (mutual TLS)");
  app.add_option("--tls-key", tls_key, "client key (mutual TLS)");
  app.add_option("--termination-message-file", termination_file, "where to write the failure reason");
  std::string alive_file;
  app.add_option("--alive-file", alive_file,
                 "file whose mtime this trainer refreshes while it makes progress (the daemon's stuck check)");
  app.add_option("--join-timeout-seconds", join_timeout, "how long to wait for the generation")->capture_default_str();
  std::string checkpoint_root;
  app.add_option("--checkpoint-root", checkpoint_root,
                 "checkpoint storage, shared by the job's workers (default: $HERD_CHECKPOINT_ROOT, else "
                 "WORK_DIR/../../checkpoints, i.e. beside the daemon's jobs folder)");
  app.add_option("--collective-timeout-seconds", collective_timeout,
                 "timeout of every collective (default: the job's collective_timeout_seconds)");
  CLI11_PARSE(app, argc, argv);

  // Every step allocates and frees the same large blocks (activations,
  // gradients). glibc would return them to the kernel (mmap above 32 MiB at
  // most, heap trimming) and fault them back in, zeroed, each step: a few
  // percent of a step in profiles. Keep them in the process instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  ExitWithParent();

  auto fail = [&](const absl::Status& status) {
    LOG(ERROR) << status;
    WriteTerminationMessage(termination_file, std::string(status.message()));
    return 1;
  };
  if (auto s = herd::SetAliveFile(alive_file); !s.ok()) return fail(s);

  std::string token;
  if (!token_file.empty()) {
    auto read = herd::ReadTokenFile(token_file);
    if (!read.ok()) return fail(read.status());
    token = *read;
  } else if (!insecure) {
    return fail(absl::InvalidArgumentError("need --token-file or --insecure-no-auth"));
  }
  auto channel = herd::MakeChannel(coordinator, herd::TlsOptions{tls_ca, tls_cert, tls_key});
  if (!channel.ok()) return fail(channel.status());

  herd::ClusterClient client(*channel, herd::ClusterClientOptions{job, worker_id, token});
  auto join = herd::JoinWithin(&client, std::chrono::milliseconds(static_cast<int64_t>(join_timeout * 1000)));
  if (!join.ok()) return fail(join.status());

  // The worker daemon exposes these from the snapshot file (one scrape target per worker).
  prometheus::Registry registry;
  herd::TrainerMetrics metrics(registry, {job, join->rank(), worker_id});
  herd::MetricsSnapshotWriter snapshots(registry, {herd::MetricsSnapshotPath(work_dir)});

  herd::TrainerOptions options;
  options.work_dir = work_dir;
  options.device = device;
  options.gpu = gpu;
  if (checkpoint_root.empty()) {
    const char* env = std::getenv("HERD_CHECKPOINT_ROOT");
    checkpoint_root = env != nullptr && *env != '\0' ? env : work_dir + "/../../checkpoints";
  }
  options.checkpoint_root = checkpoint_root;
  options.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(collective_timeout * 1000));
  auto ledger = herd::SampleLedger::FromEnvironment(worker_id);
  if (!ledger.ok()) return fail(ledger.status());
  herd::GenerationLoopOptions loop;
  loop.trainer = options;
  loop.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(join_timeout * 1000));
  absl::Status status = herd::RunGenerations(&client, *join, loop, &metrics, ledger->get());
  if (!status.ok()) return fail(status);
  LOG(INFO) << "training finished";
  return 0;
}
