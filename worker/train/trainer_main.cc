// herd-trainer: one job's training process, started by herd-worker. It joins
// the job's current generation at the coordinator and trains until done,
// carrying on through later generations when peers fail or join.
#include <glog/logging.h>

#include <torch/cuda.h>
#include <prometheus/registry.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/auth.h"
#include "common/rpc_options.h"
#include "common/version.h"
#include "common/atomic_file.h"
#include "worker/contract/trainer_contract.h"
#include "worker/train/checkpoint_files.h"
#include "worker/train/cluster_client.h"
#include "worker/train/progress_reporter.h"
#include "worker/train/torch_compat.h"
#include "worker/train/torch_errors.h"
#include "worker/train/training_context.h"
#include "worker/train/metrics_snapshot.h"
#include "worker/train/metrics_snapshot_writer.h"
#include "worker/train/generation_loop.h"
#include "worker/train/liveness.h"
#include "worker/train/release_vote.h"
#include "worker/train/sample_ledger.h"
#include "worker/train/trainer.h"
#include "worker/train/trainer_metrics.h"

namespace {

// The daemon reads this file and reports it as the job's failure reason.
void WriteTerminationMessage(const std::string& path, const std::string& message) {
  if (path.empty()) return;
  if (auto s = herd::WriteFileAtomically(path, message + "\n"); !s.ok()) LOG(ERROR) << s;
}

// Failures another generation would repeat end the job at once (the
// coordinator fails it with this message) instead of spending its restart
// budget: bad input, lost state, storage failure under on_failure: fail.
int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kPermissionDenied:
      return herd::kExitJobError;
    default:
      return 1;
  }
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

// Waits for the checkpoint write under way; what a write came to after the
// last commit point is only logged now (training is over either way).
void FinishCheckpointWrites(herd::TrainingContext* context) {
  if (context->checkpoint_writer == nullptr) return;
  context->checkpoint_writer->Wait();
  for (const herd::CheckpointOutcome& outcome : context->checkpoint_writer->TakeFinished()) {
    LOG_IF(WARNING, !outcome.status.ok()) << "checkpoint at step " << outcome.step << " failed: " << outcome.status;
  }
}

// Stops the reporter and leaves the checkpoint records it could not deliver
// in the unrecorded-checkpoints file for the daemon.
void HandOverUnrecordedCheckpoints(herd::ProgressReporter* reporter, const std::string& work_dir) {
  herd::v1::CheckpointRecords records;
  for (auto& record : reporter->Stop()) *records.add_records() = std::move(record);
  if (records.records().empty()) return;
  if (auto s = herd::WriteUnrecordedCheckpoints(herd::UnrecordedCheckpointsPath(work_dir), records); !s.ok()) {
    LOG(ERROR) << s;
    return;
  }
  LOG(WARNING) << records.records_size() << " checkpoint record(s) not acknowledged by the coordinator (newest: step "
               << records.records().rbegin()->step() << "); the worker daemon delivers them";
}

}  // namespace

int main(int argc, char** argv) {
  // herd-worker --device=cuda asks, before it registers, how many GPUs this
  // trainer's LibTorch sees (worker/daemon/device_probe.h).
  if (argc == 2 && std::string(argv[1]) == "--probe-devices") {
    std::cout << "cuda_devices " << (torch::cuda::is_available() ? torch::cuda::device_count() : 0) << "\n";
    return 0;
  }
  CLI::App app{"herd-trainer: runs one job's training steps (started by herd-worker, not by hand; "
               "--probe-devices alone prints how many GPUs it sees)"};
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
  app.add_option("--join-timeout-seconds", join_timeout,
                 "how long to wait for a generation: the first, the next after a failure, or re-admission after "
                 "this worker was left out of one (the job context is kept meanwhile)")
      ->capture_default_str();
  std::string checkpoint_root;
  app.add_option("--checkpoint-root", checkpoint_root,
                 "checkpoint storage, shared by the job's workers (the daemon passes it; default: "
                 "$HERD_CHECKPOINT_ROOT)");
  app.add_option("--collective-timeout-seconds", collective_timeout,
                 "timeout of every collective (default: the job's collective_timeout_seconds)");
  app.set_version_flag("--version", std::string("herd-trainer ") + herd::kVersion);
  CLI11_PARSE(app, argc, argv);

  // Every step allocates and frees the same large blocks (activations,
  // gradients). glibc would return them to the kernel (mmap for big blocks,
  // heap trimming) and fault them back in, zeroed, each step. Keep them in
  // the process instead. The mmap threshold cannot go above 32 MiB, so a
  // larger gradient (a 4096x4096 layer's is 64 MiB) was still mapped afresh
  // every step: a quarter of a compute-bound mlp's time went to page faults
  // (bench/README, "Never slower than DDP"). No mmap at all: every block
  // comes from the heap and is reused.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);

  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  ExitWithParent();

  auto fail = [&](const absl::Status& status) {
    LOG(ERROR) << status;
    WriteTerminationMessage(termination_file, std::string(status.message()));
    return ExitCodeFor(status);
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

  if (checkpoint_root.empty()) {
    const char* env = std::getenv("HERD_CHECKPOINT_ROOT");
    if (env == nullptr || *env == '\0') {
      return fail(absl::InvalidArgumentError("need --checkpoint-root (or $HERD_CHECKPOINT_ROOT)"));
    }
    checkpoint_root = env;
  }
  herd::TrainerOptions options;
  options.job_id = job;
  options.work_dir = work_dir;
  options.device = device;
  options.gpu = gpu;
  options.checkpoint_root = checkpoint_root;
  options.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(collective_timeout * 1000));
  // One small file read per commit point: the daemon writes it when asked.
  options.leave_request = [path = herd::ReleaseRequestPath(work_dir)] { return herd::ReadReleaseRequest(path); };
  options.reform_requested_generation = [path = herd::ReformRequestPath(work_dir)] {
    return herd::ReadReformRequest(path);
  };
  auto ledger = herd::SampleLedger::FromEnvironment(job, worker_id);
  if (!ledger.ok()) return fail(ledger.status());
  if (join->rank() == 0) herd::SweepCheckpointLeftovers(checkpoint_root, job);
  // Checkpoint records and progress leave the step loop; retention deletes
  // what the coordinator's answer names, on the reporter's thread.
  herd::ProgressReporter reporter(&client, [&checkpoint_root](const herd::v1::CommitCheckpointResponse& recorded) {
    for (const auto& old : recorded.delete_paths()) {
      if (auto s = herd::DeleteCheckpointFolder(checkpoint_root, old); !s.ok()) LOG(WARNING) << s;
    }
    LOG(INFO) << "checkpoint " << recorded.checkpoint().id() << " at step " << recorded.checkpoint().step()
              << " recorded";
  });
  absl::StatusOr<std::unique_ptr<herd::TrainingContext>> context;
  try {
    context = herd::TrainingContext::Create(join->spec(), static_cast<int64_t>(join->seed()), options, &metrics,
                                            ledger->get(), &reporter);
  } catch (const std::exception& e) {
    // A model too large for the device fails the job at once, naming it.
    context = herd::TrainingError(e, {"building the job's model and data", join->spec().model().name(),
                                      options.device, join->spec().batch_size(), 0});
  }
  if (!context.ok()) return fail(context.status());
  herd::MetricsSnapshotWriter snapshots(
      registry, {herd::MetricsSnapshotPath(work_dir), std::chrono::milliseconds(1000),
                 [&metrics, device = (*context)->device] {
                   metrics.SetDeviceMemoryPeak(herd::DevicePeakReservedBytes(device));
                 }});
  herd::GenerationLoopOptions loop;
  loop.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(join_timeout * 1000));
  absl::Status status = herd::RunGenerations(&client, context->get(), *join, loop);
  // Whatever ended training, a checkpoint write under way completes first:
  // its copy was taken, so it is written and posted, never left half done.
  FinishCheckpointWrites(context->get());
  // Records the coordinator has not acknowledged go to the daemon, which
  // delivers them (a coordinator down as the job ends still records them).
  auto hand_over = [&] { HandOverUnrecordedCheckpoints(&reporter, work_dir); };
  if (herd::IsReleased(status)) {
    // Every rank committed this step; its report rides with the exit, so the
    // job re-forms from it even when this was rank 0.
    if (auto s = herd::WriteFinalReport(herd::FinalReportPath(work_dir), (*context)->last_report); !s.ok()) {
      hand_over();
      return fail(s);
    }
    if (!reporter.Flush(std::chrono::seconds(5))) LOG(WARNING) << "the coordinator has not acknowledged the last report";
    hand_over();
    LOG(INFO) << status.message();
    return herd::IsReleasedAll(status) ? herd::kExitReleasedAll : herd::kExitReleased;
  }
  if (!status.ok()) {
    hand_over();
    return fail(status);
  }
  // The final report goes with the exit too (the daemon resends it until the
  // coordinator acknowledges), so a coordinator down at the end loses nothing.
  if (auto s = herd::WriteFinalReport(herd::FinalReportPath(work_dir), (*context)->last_report); !s.ok()) {
    hand_over();
    return fail(s);
  }
  if (!reporter.Flush(std::chrono::seconds(5))) LOG(WARNING) << "the coordinator has not acknowledged the final report";
  hand_over();
  LOG(INFO) << "training finished";
  return 0;
}
