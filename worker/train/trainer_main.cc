// herd-trainer: one job's training process, started by herd-worker. It joins
// the job's current generation at the coordinator and trains until done,
// carrying on through later generations when peers fail or join. Its command
// line is worker/contract/trainer_args.h.
#include <glog/logging.h>

#include <torch/cuda.h>
#include <prometheus/registry.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include "common/auth.h"
#include "common/rpc_options.h"
#include "common/atomic_file.h"
#include "worker/contract/generation_outcome.h"
#include "worker/contract/trainer_args.h"
#include "worker/contract/trainer_contract.h"
#include "worker/train/checkpoint/checkpoint_files.h"
#include "worker/train/generation/cluster_client.h"
#include "worker/train/report/progress_reporter.h"
#include "worker/train/step/torch_compat.h"
#include "worker/train/step/torch_errors.h"
#include "worker/train/training_context.h"
#include "worker/train/generation/data_plane_audit.h"
#include "worker/train/group_communicators.h"
#include "worker/train/report/metrics_snapshot.h"
#include "worker/train/report/metrics_snapshot_writer.h"
#include "worker/train/optim/openblas_kernels.h"
#include "worker/train/generation_loop.h"
#include "worker/train/generation/liveness.h"
#include "worker/train/batches/sample_ledger.h"
#include "worker/train/trainer.h"
#include "worker/train/report/trainer_metrics.h"

namespace {

// What CLI11 printed for a bad command line, with its exit code.
int ReportBadArgs(const absl::Status& status) {
  std::cerr << status.message() << "\n" << herd::kBadArgsHint << "\n" << std::flush;
  return herd::ExitCodeForBadArgs(status);
}

// herd-worker --device=cuda asks, before it registers, how many GPUs this
// trainer's LibTorch sees (worker/daemon/device_probe.h).
int PrintCudaDevices() {
  std::cout << "cuda_devices " << (torch::cuda::is_available() ? torch::cuda::device_count() : 0) << "\n";
  return 0;
}

// Every step allocates and frees the same large blocks (activations,
// gradients). glibc would return them to the kernel (mmap for big blocks,
// heap trimming) and fault them back in, zeroed, each step. Keep them in
// the process instead. The mmap threshold cannot go above 32 MiB, so a
// larger gradient (a 4096x4096 layer's is 64 MiB) was still mapped afresh
// every step: a quarter of a compute-bound mlp's time went to page faults
// (bench/README, "Measured design choices"). No mmap at all: every block
// comes from the heap and is reused.
void KeepFreedMemoryInProcess() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
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

// The daemon reads this file and reports it as the job's failure reason.
void WriteTerminationMessage(const std::string& path, const std::string& message) {
  if (path.empty()) return;
  if (auto s = herd::WriteFileAtomically(path, message + "\n"); !s.ok()) LOG(ERROR) << s;
}

std::chrono::milliseconds SecondsToMillis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

absl::StatusOr<std::string> ReadToken(const herd::TrainerArgs& args) {
  if (!args.token_file.empty()) return herd::ReadTokenFile(args.token_file);
  if (!args.insecure_no_auth) return absl::InvalidArgumentError("need --token-file or --insecure-no-auth");
  return std::string();
}

absl::StatusOr<std::string> CheckpointRoot(const herd::TrainerArgs& args) {
  if (!args.checkpoint_root.empty()) return args.checkpoint_root;
  const char* env = std::getenv("HERD_CHECKPOINT_ROOT");
  if (env == nullptr || *env == '\0') {
    return absl::InvalidArgumentError("need --checkpoint-root (or $HERD_CHECKPOINT_ROOT)");
  }
  return std::string(env);
}

herd::TrainerOptions TrainerOptionsFor(const herd::TrainerArgs& args, const std::string& checkpoint_root) {
  herd::TrainerOptions options;
  options.job_id = args.job;
  options.work_dir = args.work_dir;
  options.device = args.device;
  options.gpu = args.gpu;
  options.checkpoint_root = checkpoint_root;
  options.collective_timeout = SecondsToMillis(args.collective_timeout_seconds);
  // One small file read per commit point: the daemon writes it when asked.
  options.leave_request = [path = herd::ReleaseRequestPath(args.work_dir)] { return herd::ReadReleaseRequest(path); };
  options.reform_requested_generation = [path = herd::ReformRequestPath(args.work_dir)] {
    return herd::ReadReformRequest(path);
  };
  return options;
}

// What the progress reporter does with a recorded checkpoint: retention
// deletes what the coordinator's answer names, on the reporter's thread.
auto OnCheckpointRecorded(const std::string& checkpoint_root) {
  return [checkpoint_root](const herd::v1::CommitCheckpointResponse& recorded) {
    for (const auto& old : recorded.delete_paths()) {
      if (auto s = herd::DeleteCheckpointFolder(checkpoint_root, old); !s.ok()) LOG(WARNING) << s;
    }
    LOG(INFO) << "checkpoint " << recorded.checkpoint().id() << " at step " << recorded.checkpoint().step()
              << " recorded";
  };
}

// The job's model, data and optimizer; a model too large for the device
// fails the job at once, naming it.
absl::StatusOr<std::unique_ptr<herd::TrainingContext>> CreateContext(const herd::v1::JoinGenerationResponse& join,
                                                                     const herd::TrainerOptions& options,
                                                                     herd::TrainerMetrics* metrics,
                                                                     herd::SampleLedger* ledger,
                                                                     herd::ProgressReporter* reporter) {
  try {
    return herd::TrainingContext::Create(join.spec(), static_cast<int64_t>(join.seed()), options, metrics, ledger,
                                         reporter);
  } catch (const std::exception& e) {
    return herd::TrainingError(
        e, {"building the job's model and data", join.spec().model().name(), options.device, join.spec().batch_size(), 0});
  }
}

// Waits for the checkpoint write under way; what a write came to after the
// last commit point is only logged now (training is over either way).
void FinishCheckpointWrites(herd::TrainingContext* context) {
  context->checkpoints().DrainAtExit();
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

// Logs a failure, leaves it for the daemon, and gives its exit code: a
// failure another generation would repeat ends the job at once (the
// coordinator fails it with this message) instead of spending its restart
// budget (GenerationOutcome::kJobFailed).
int Fail(const herd::TrainerArgs& args, const absl::Status& status) {
  LOG(ERROR) << status;
  WriteTerminationMessage(args.termination_message_file, std::string(status.message()));
  return herd::TrainerExitCode(herd::ClassifyStatus(status));
}

// The exit after the generations ended with `end`.
int Finish(const herd::TrainerArgs& args, const herd::GenerationResult& end, herd::TrainingContext* context,
           herd::ProgressReporter* reporter) {
  // Whatever ended training, a checkpoint write under way completes first:
  // its copy was taken, so it is written and posted, never left half done.
  FinishCheckpointWrites(context);
  // Records the coordinator has not acknowledged go to the daemon, which
  // delivers them (a coordinator down as the job ends still records them).
  auto hand_over = [&] { HandOverUnrecordedCheckpoints(reporter, args.work_dir); };
  if (!herd::WritesFinalReport(end.outcome)) {
    hand_over();
    return Fail(args, end.error);
  }
  // The final report goes with the exit too (the daemon resends it until the
  // coordinator acknowledges), so a coordinator down at the end loses
  // nothing. A released rank's is the boundary's, which every rank
  // committed, so the job re-forms from it even when this was rank 0.
  if (auto s = herd::WriteFinalReport(herd::FinalReportPath(args.work_dir), context->progress().last_report()); !s.ok()) {
    hand_over();
    return Fail(args, s);
  }
  if (!reporter->Flush(std::chrono::seconds(5))) LOG(WARNING) << "the coordinator has not acknowledged the final report";
  hand_over();
  LOG(INFO) << herd::Describe(end);
  return herd::TrainerExitCode(end.outcome);
}

// Joins the job and trains it through its generations; returns the exit code.
int Train(const herd::TrainerArgs& args) {
  if (auto s = herd::SetAliveFile(args.alive_file); !s.ok()) return Fail(args, s);
  auto token = ReadToken(args);
  if (!token.ok()) return Fail(args, token.status());
  auto coordinator =
      herd::LeaderChannel::Open(args.coordinator, herd::TlsOptions{args.tls_ca, args.tls_cert, args.tls_key});
  if (!coordinator.ok()) return Fail(args, coordinator.status());

  herd::ClusterClient client(*coordinator, herd::ClusterClientOptions{args.job, args.worker_id, *token});
  const std::chrono::milliseconds join_timeout = SecondsToMillis(args.join_timeout_seconds);
  auto join = herd::JoinWithin(&client, join_timeout);
  if (!join.ok()) return Fail(args, join.status());

  // The worker daemon exposes these from the snapshot file (one scrape target per worker).
  prometheus::Registry registry;
  herd::TrainerMetrics metrics(registry, {args.job, join->rank(), args.worker_id});

  auto checkpoint_root = CheckpointRoot(args);
  if (!checkpoint_root.ok()) return Fail(args, checkpoint_root.status());
  const herd::TrainerOptions options = TrainerOptionsFor(args, *checkpoint_root);
  auto ledger = herd::SampleLedger::FromEnvironment(args.job, args.worker_id);
  if (!ledger.ok()) return Fail(args, ledger.status());
  if (join->rank() == 0) herd::SweepCheckpointLeftovers(*checkpoint_root, args.job);
  // Checkpoint records and progress leave the step loop.
  herd::ProgressReporter reporter(&client, OnCheckpointRecorded(*checkpoint_root));
  auto context = CreateContext(*join, options, &metrics, ledger->get(), &reporter);
  if (!context.ok()) return Fail(args, context.status());
  herd::MetricsSnapshotWriter snapshots(
      registry, {herd::MetricsSnapshotPath(args.work_dir), std::chrono::milliseconds(1000),
                 [&metrics, device = (*context)->device()] {
                   metrics.SetDeviceMemoryPeak(herd::DevicePeakReservedBytes(device));
                 }});
  herd::GenerationLoopOptions loop;
  loop.join_timeout = join_timeout;
  herd::DataPlaneAudit audit(registry, args.job, args.worker_id);
  std::string old_name;
  const std::string data_plane = herd::CurrentDataPlaneName(args.data_plane, &old_name);
  if (!old_name.empty()) LOG(WARNING) << old_name;
  loop.communicators = herd::GroupCommunicatorsOn(
      {data_plane == herd::kGlooDataPlane ? herd::DataPlane::kGloo : herd::DataPlane::kTcp,
       args.congestion_control, args.data_plane_lanes,
       [&audit](const herd::RejectedConnection& rejected, int64_t generation, int rank) {
         audit.Record(rejected, generation, rank);
       }});
  const herd::GenerationResult end = herd::RunGenerations(&client, context->get(), *join, loop);
  return Finish(args, end, context->get(), &reporter);
}

}  // namespace

int main(int argc, char** argv) {
  const absl::StatusOr<herd::TrainerArgs> args = herd::ParseArgv(argc, argv);
  if (!args.ok()) return ReportBadArgs(args.status());
  switch (args->action) {
    case herd::TrainerArgs::Action::kProbeDevices:
      return PrintCudaDevices();
    case herd::TrainerArgs::Action::kProbeOpenBlas:
      std::cout << "openblas_core " << herd::TrainerOpenBlasCore() << "\n" << std::flush;
      return 0;
    case herd::TrainerArgs::Action::kPrintAndExit:
      std::cout << args->output << std::flush;
      return 0;
    case herd::TrainerArgs::Action::kTrain:
      break;
  }
  // Before anything else runs: the process starts over (same PID) when its
  // OpenBLAS runs generic kernels on a CPU that can do far better.
  herd::ReexecWithBetterOpenBlasKernels(argv);
  KeepFreedMemoryInProcess();
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  LOG(INFO) << herd::DescribeOpenBlasKernels();
  ExitWithParent();
  return Train(*args);
}
