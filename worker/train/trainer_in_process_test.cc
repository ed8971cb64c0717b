// Whole trainers (job context, generations, sync strategy, commits, healing)
// as threads of this test, against an in-memory coordinator: the context's
// step, commit and heal under failures injected at a chosen collective.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "worker/train/checkpoint/checkpoint_files.h"
#include "worker/data/testing/idx_test_files.h"
#include "worker/train/generation_loop.h"
#include "worker/train/report/progress_reporter.h"
#include "worker/train/sync/replicas.h"
#include "worker/train/batches/sample_ledger.h"
#include "worker/train/testing/faulty_communicator.h"
#include "worker/train/testing/in_process_coordinator.h"
#include "worker/train/report/trainer_metrics.h"
#include "worker/train/training_context.h"
#include "common/spec_enums.h"

namespace herd {
namespace {

constexpr int64_t kSamples = 480;
constexpr char kJob[] = "job-1";

v1::JobSpec Spec(const std::string& mode) {
  v1::JobSpec spec;
  spec.set_name("in-process");
  spec.mutable_model()->set_name("mlp");
  spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_samples(kSamples);
  spec.mutable_dataset()->set_synthetic_features(16);
  spec.mutable_dataset()->set_synthetic_classes(4);
  spec.set_batch_size(16);
  spec.set_epochs(2);
  spec.set_log_interval_steps(2);
  spec.set_collective_timeout_seconds(30);
  spec.mutable_optimizer()->set_name(v1::OPTIMIZER_NAME_SGD);
  spec.mutable_optimizer()->set_lr(0.05);
  spec.mutable_optimizer()->set_momentum(0.9);  // state the heal must carry
  spec.mutable_eval()->set_max_samples(64);
  spec.mutable_sync()->set_mode(*ParseSpecName<v1::SyncMode>(mode, "sync.mode"));
  spec.mutable_sync()->set_same_host_transport(v1::SAME_HOST_TRANSPORT_TCP);  // thread ranks: Gloo over loopback
  if (mode == "average") {
    spec.mutable_sync()->set_every(3);
    spec.mutable_sync()->set_warmup_steps(2);
    spec.mutable_sync()->mutable_outer()->set_kind(v1::OUTER_KIND_NESTEROV);
  }
  ApplyJobDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

std::mutex& ComputeMutex() {
  static std::mutex mu;
  return mu;
}

// A fault: in generation `generation`, the `call`th collective of the
// listed workers fails with `failure`, after `before` runs (on each of them).
struct Fault {
  int64_t generation = 1;
  int64_t call = 0;
  std::vector<std::string> workers;
  absl::Status failure;
  std::function<void()> before;
};

struct RankOutcome {
  absl::Status status;
  int64_t step = -1;
  int64_t epoch = -1;
  torch::Tensor params;
  std::vector<torch::Tensor> buffers;  // the model's (batch norm's running statistics)
  int64_t prefetch_hits = 0;  // batches the prefetcher had ready (0 without one)
  int64_t prefetch_misses = 0;
  // herd_train_cuda_graph_fallbacks_total by reason, where the job kept metrics.
  std::map<std::string, double> cuda_graph_fallbacks;
  bool host_step_seconds_exported = false;
};

class InProcessJob {
 public:
  InProcessJob(const v1::JobSpec& spec, std::vector<std::string> workers, std::vector<Fault> faults)
      : coordinator_(kJob, spec, /*seed=*/7), workers_(std::move(workers)), faults_(std::move(faults)) {
    root_ = std::filesystem::path(testing::TempDir()) / absl::StrCat("job-", ++runs_);
    std::filesystem::create_directories(root_ / "ledger");
    coordinator_.SetMembers(workers_);
  }

  InProcessCoordinator& coordinator() { return coordinator_; }
  // TrainerOptions::prefetch_batches for every rank (unset: a CPU trainer gathers in the step).
  void PrefetchBatches(bool on) { prefetch_batches_ = on; }
  // Each rank exports TrainerMetrics to its own registry (read into RankOutcome).
  void KeepMetrics(bool on) { keep_metrics_ = on; }
  std::filesystem::path checkpoint_root() const { return root_ / "checkpoints"; }

  // Runs every worker's trainer to its end; the outcomes by worker id.
  std::map<std::string, RankOutcome> Run() {
    // Read by SampleLedger::FromEnvironment before any rank thread starts.
    setenv(kSampleLedgerDirEnv, (root_ / "ledger").c_str(), 1);
    std::map<std::string, RankOutcome> outcomes;
    for (const auto& id : workers_) outcomes[id];
    std::vector<std::thread> threads;
    for (const auto& id : workers_) {
      threads.emplace_back([this, id, &outcomes] { outcomes[id] = RunRank(id); });
    }
    for (auto& t : threads) t.join();
    unsetenv(kSampleLedgerDirEnv);
    return outcomes;
  }

  std::vector<std::string> LedgerContents() const {
    std::vector<std::string> contents;
    for (const auto& entry : std::filesystem::directory_iterator(root_ / "ledger")) {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      contents.push_back(text.str());
    }
    return contents;
  }

 private:
  CommunicatorFactory FactoryFor(const std::string& worker_id) {
    return [this, worker_id](const v1::JoinGenerationResponse& join, const TrainingContext& context,
                             CoordinatorLink* link) -> absl::StatusOr<GroupCommunicators> {
      auto group = CreateGroupCommunicators(join, context, link);
      if (!group.ok()) return group;
      for (const auto& fault : faults_) {
        if (fault.generation != join.generation() ||
            std::find(fault.workers.begin(), fault.workers.end(), worker_id) == fault.workers.end()) {
          continue;
        }
        group->control = std::make_unique<FaultyCommunicator>(std::move(group->control), fault.call, fault.failure,
                                                              fault.before);
        group->data = group->control.get();
      }
      return group;
    };
  }

  RankOutcome RunRank(const std::string& worker_id) {
    RankOutcome outcome;
    auto link = coordinator_.Link(worker_id);
    auto join = JoinWithin(link.get(), std::chrono::seconds(60));
    if (!join.ok()) {
      outcome.status = join.status();
      return outcome;
    }
    auto ledger = SampleLedger::FromEnvironment(kJob, worker_id);
    if (!ledger.ok()) {
      outcome.status = ledger.status();
      return outcome;
    }
    ProgressReporter reporter(link.get(), nullptr);
    TrainerOptions options;
    options.job_id = kJob;
    options.work_dir = (root_ / worker_id).string();
    options.checkpoint_root = (root_ / "checkpoints").string();
    options.compute_mutex = &ComputeMutex();
    options.prefetch_batches = prefetch_batches_;
    std::filesystem::create_directories(options.work_dir);
    prometheus::Registry registry;
    std::unique_ptr<TrainerMetrics> metrics;
    if (keep_metrics_) metrics = std::make_unique<TrainerMetrics>(registry, TrainerMetricsLabels{kJob, 0, worker_id});
    auto context = TrainingContext::Create(join->spec(), static_cast<int64_t>(join->seed()), options, metrics.get(),
                                           ledger->get(), &reporter);
    if (!context.ok()) {
      outcome.status = context.status();
      return outcome;
    }
    GenerationLoopOptions loop;
    loop.join_timeout = std::chrono::seconds(60);
    loop.communicators = FactoryFor(worker_id);
    outcome.status = RunGenerations(link.get(), context->get(), *join, loop).error;
    outcome.step = (*context)->position().step;
    outcome.epoch = (*context)->position().epoch;
    outcome.params = FlattenParameters((*context)->params());
    for (const auto& buffer : (*context)->model()->Buffers()) outcome.buffers.push_back(buffer.clone());
    if ((*context)->prefetcher() != nullptr) {
      outcome.prefetch_hits = (*context)->prefetcher()->hits();
      outcome.prefetch_misses = (*context)->prefetcher()->misses();
    }
    for (const auto& family : registry.Collect()) {
      if (family.name == "herd_train_host_step_seconds") outcome.host_step_seconds_exported = !family.metric.empty();
      if (family.name != "herd_train_cuda_graph_fallbacks_total") continue;
      for (const auto& m : family.metric) {
        for (const auto& label : m.label) {
          if (label.name == "reason") outcome.cuda_graph_fallbacks[label.value] = m.counter.value;
        }
      }
    }
    return outcome;
  }

  static inline int runs_ = 0;
  InProcessCoordinator coordinator_;
  std::vector<std::string> workers_;
  std::vector<Fault> faults_;
  std::filesystem::path root_;
  std::optional<bool> prefetch_batches_;
  bool keep_metrics_ = false;
};

// Every sample of each of the job's epochs exactly once in the history that
// stayed (rolled-back steps excluded); the replay for further checks.
LedgerReplay ExpectEverySampleOnce(const std::vector<std::string>& ledgers, int64_t epochs) {
  auto replay = ReplayLedgers(ledgers);
  EXPECT_TRUE(replay.ok()) << replay.status();
  if (!replay.ok()) return {};
  EXPECT_EQ(static_cast<int64_t>(replay->committed.size()), epochs);
  for (auto [epoch, ids] : replay->committed) {
    std::sort(ids.begin(), ids.end());
    std::vector<int64_t> expected(kSamples);
    for (int64_t i = 0; i < kSamples; ++i) expected[i] = i;
    EXPECT_EQ(ids, expected) << "epoch " << epoch;
  }
  return *replay;
}

int64_t LastReportedStep(const InProcessCoordinator& coordinator, int64_t generation) {
  int64_t step = -1;
  for (const auto& report : coordinator.reports()) {
    if (report.generation() == generation) step = std::max(step, report.step());
  }
  return step;
}

Fault CollectiveFailure(int64_t generation, int64_t call, std::vector<std::string> workers,
                        std::function<void()> before = nullptr) {
  return Fault{generation, call, std::move(workers), absl::UnavailableError("injected: a peer's connection dropped"),
               std::move(before)};
}

// A sync mode, and a collective early enough in its run to fail mid-training
// (mode average issues far fewer collectives per step).
struct HealCase {
  std::string name;
  std::string mode;
  int64_t fault_call;
  // Streaming settings on top of Spec(mode), whose state (per-fragment
  // anchors, a round in flight, int8 residuals) the heal must get right.
  std::function<void(v1::SyncSpec*)> tweak;
  // The heal must resume after this step: past warmup (step 2), where int8
  // residuals are no longer zero, so restoring them is what is tested.
  int64_t resume_after_step = 0;
};

v1::JobSpec HealSpec(const HealCase& c) {
  v1::JobSpec spec = Spec(c.mode);
  if (c.tweak) c.tweak(spec.mutable_sync());
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

class HealTest : public testing::TestWithParam<HealCase> {};

// A failed generation costs nothing: every rank rolls back to the commit it
// holds, heals, and the job ends bitwise where an uninterrupted run ends
// (parameters, optimizer and outer state, sampler position all carried).
TEST_P(HealTest, FailedGenerationEndsBitwiseWhereAnUninterruptedRunEnds) {
  const v1::JobSpec spec = HealSpec(GetParam());
  InProcessJob clean(spec, {"w0", "w1"}, {});
  auto reference = clean.Run();
  ASSERT_TRUE(reference["w0"].status.ok()) << reference["w0"].status;
  ASSERT_TRUE(reference["w1"].status.ok()) << reference["w1"].status;
  EXPECT_EQ(clean.coordinator().generation(), 1);

  InProcessJob faulty(spec, {"w0", "w1"}, {CollectiveFailure(1, GetParam().fault_call, {"w0", "w1"})});
  auto outcomes = faulty.Run();
  for (const auto& id : {"w0", "w1"}) {
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_EQ(outcomes[id].step, reference[id].step) << id;
    EXPECT_TRUE(torch::equal(outcomes[id].params, reference[id].params)) << id << " ends elsewhere";
  }
  EXPECT_EQ(faulty.coordinator().generation(), 2);
  EXPECT_FALSE(faulty.coordinator().failures().empty());
  const LedgerReplay replay = ExpectEverySampleOnce(faulty.LedgerContents(), spec.epochs());
  // Generation 2 resumed from the newest commit, not from the start.
  ASSERT_EQ(replay.generation_start_step.count(2), 1u);
  EXPECT_GT(replay.generation_start_step.at(2), GetParam().resume_after_step);
  EXPECT_GE(replay.generation_start_step.at(2), LastReportedStep(faulty.coordinator(), 1));
  EXPECT_GT(replay.rolled_back_records, 0) << "the fault came after the last step: nothing was re-run";
}

// Batches gathered ahead on the prefetcher's thread (a CUDA trainer's
// default) train bitwise like batches gathered in the step, also across a
// failed generation, whose rollback makes the prefetched plan a miss.
TEST(InProcessTrainers, PrefetchedBatchesTrainBitwiseLikeBatchesGatheredInTheStep) {
  const v1::JobSpec spec = Spec("allreduce");
  InProcessJob gathered(spec, {"w0", "w1"}, {});
  auto reference = gathered.Run();
  InProcessJob prefetched(spec, {"w0", "w1"}, {});
  prefetched.PrefetchBatches(true);
  auto clean = prefetched.Run();
  InProcessJob healed(spec, {"w0", "w1"}, {CollectiveFailure(1, 40, {"w0", "w1"})});
  healed.PrefetchBatches(true);
  auto outcomes = healed.Run();
  for (const auto& id : {"w0", "w1"}) {
    ASSERT_TRUE(reference[id].status.ok()) << id << ": " << reference[id].status;
    EXPECT_EQ(reference[id].prefetch_hits + reference[id].prefetch_misses, 0) << "a CPU trainer prefetched by default";
    ASSERT_TRUE(clean[id].status.ok()) << id << ": " << clean[id].status;
    EXPECT_TRUE(torch::equal(clean[id].params, reference[id].params)) << id;
    // Every step after the first took a prefetched batch (the first has nothing queued before it).
    EXPECT_EQ(clean[id].prefetch_misses, 1) << id;
    EXPECT_EQ(clean[id].prefetch_hits, clean[id].step - 1) << id;
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_TRUE(torch::equal(outcomes[id].params, reference[id].params)) << id << " ends elsewhere";
    EXPECT_GT(outcomes[id].prefetch_hits, 0) << id;
  }
  EXPECT_EQ(healed.coordinator().generation(), 2);
  ExpectEverySampleOnce(healed.LedgerContents(), spec.epochs());
}

INSTANTIATE_TEST_SUITE_P(
    SyncModes, HealTest,
    testing::Values(HealCase{"allreduce", "allreduce", 40}, HealCase{"average", "average", 12},
                    HealCase{"fragments", "average", 12,
                             [](v1::SyncSpec* s) {
                               s->set_every(4);
                               s->set_fragments(2);
                             }},
                    HealCase{"overlap", "average", 12, [](v1::SyncSpec* s) { s->set_overlap(true); }},
                    HealCase{"shard_optimizer", "allreduce", 40,
                             [](v1::SyncSpec* s) { s->set_shard_optimizer(true); }},
                    HealCase{"int8_fragments_overlap", "average", 22,
                             [](v1::SyncSpec* s) {
                               s->set_every(4);
                               s->set_fragments(2);
                               s->set_overlap(true);
                               s->set_compression(v1::COMPRESSION_INT8);
                             },
                             /*resume_after_step=*/2},
                    // Rounds landing 3 steps late, int8 scales exchanged in the background.
                    HealCase{"int8_fragments_delayed_merge", "average", 22,
                             [](v1::SyncSpec* s) {
                               s->set_every(4);
                               s->set_fragments(2);
                               s->set_overlap_steps(3);
                               s->set_compression(v1::COMPRESSION_INT8);
                             },
                             /*resume_after_step=*/2}),
    [](const testing::TestParamInfo<HealCase>& info) { return info.param.name; });

// sync.islands_by: two islands of two ranks (sites a and b), ordered by
// island as the coordinator orders them.
const std::vector<std::string> kIslandWorkers = {"a0", "a1", "b0", "b1"};

std::map<std::string, RankOutcome> RunIslands(const v1::JobSpec& spec, std::vector<Fault> faults,
                                              InProcessJob** job_out = nullptr) {
  static std::vector<std::unique_ptr<InProcessJob>> jobs;  // kept for the caller's checks
  jobs.push_back(std::make_unique<InProcessJob>(spec, kIslandWorkers, std::move(faults)));
  InProcessJob& job = *jobs.back();
  for (const auto& id : kIslandWorkers) job.coordinator().SetLabels(id, {{"site", id.substr(0, 1)}});
  if (job_out != nullptr) *job_out = &job;
  return job.Run();
}

class IslandHealTest : public testing::TestWithParam<HealCase> {};

// Islands train to the end with every rank bitwise identical (the trainer
// verifies it across all four), and a failed generation heals: the job ends
// bitwise where an uninterrupted run ends, so the outer state of every
// shard, the island schedule and the sampler position were all carried,
// and no committed step is lost.
TEST_P(IslandHealTest, FailedGenerationEndsBitwiseWhereAnUninterruptedRunEnds) {
  v1::JobSpec spec = HealSpec(GetParam());
  spec.mutable_sync()->set_islands_by("site");
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  InProcessJob* clean = nullptr;
  auto reference = RunIslands(spec, {}, &clean);
  for (const auto& id : kIslandWorkers) {
    ASSERT_TRUE(reference[id].status.ok()) << id << ": " << reference[id].status;
    EXPECT_TRUE(torch::equal(reference[id].params, reference["a0"].params)) << id;
  }
  EXPECT_EQ(clean->coordinator().generation(), 1);
  ExpectEverySampleOnce(clean->LedgerContents(), spec.epochs());

  InProcessJob* faulty = nullptr;
  auto outcomes = RunIslands(spec, {CollectiveFailure(1, GetParam().fault_call, kIslandWorkers)}, &faulty);
  for (const auto& id : kIslandWorkers) {
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_EQ(outcomes[id].step, reference[id].step) << id;
    EXPECT_TRUE(torch::equal(outcomes[id].params, reference[id].params)) << id << " ends elsewhere";
  }
  EXPECT_EQ(faulty->coordinator().generation(), 2);
  EXPECT_FALSE(faulty->coordinator().failures().empty());
  const LedgerReplay replay = ExpectEverySampleOnce(faulty->LedgerContents(), spec.epochs());
  ASSERT_EQ(replay.generation_start_step.count(2), 1u);
  EXPECT_GT(replay.generation_start_step.at(2), GetParam().resume_after_step);
  EXPECT_GE(replay.generation_start_step.at(2), LastReportedStep(faulty->coordinator(), 1));
  EXPECT_GT(replay.rolled_back_records, 0) << "the fault came after the last step: nothing was re-run";
}

// Islands end elsewhere than the flat averaging of the same four ranks: the
// island all-reduce and the shard rounds changed what was trained.
TEST(InProcessIslands, IslandsTrainOtherwiseThanFlatAveraging) {
  const v1::JobSpec flat_spec = Spec("average");
  v1::JobSpec spec = flat_spec;
  spec.mutable_sync()->set_islands_by("site");
  auto islands = RunIslands(spec, {});
  InProcessJob flat(flat_spec, kIslandWorkers, {});
  auto plain = flat.Run();
  ASSERT_TRUE(islands["a0"].status.ok()) << islands["a0"].status;
  ASSERT_TRUE(plain["a0"].status.ok()) << plain["a0"].status;
  EXPECT_EQ(islands["a0"].step, plain["a0"].step);
  EXPECT_FALSE(torch::equal(islands["a0"].params, plain["a0"].params));
}

// An island that loses a member goes on at the smaller size: the next
// generation has islands of 2 and 1 (one shard, a rank without one), heals
// from the commits held, carries the outer state into the new layout and
// ends with the survivors identical and every sample once.
TEST(InProcessIslands, IslandLosingARankGoesOnAtTheSmallerSize) {
  v1::JobSpec spec = Spec("average");
  spec.mutable_sync()->set_islands_by("site");
  InProcessJob* job_ptr = nullptr;
  Fault crash{1, 10, {"b1"}, absl::InternalError("injected: the trainer crashed"),
              [&job_ptr] { job_ptr->coordinator().SetMembers({"a0", "a1", "b0"}); }};
  InProcessJob job(spec, kIslandWorkers, {crash});
  job_ptr = &job;
  for (const auto& id : kIslandWorkers) job.coordinator().SetLabels(id, {{"site", id.substr(0, 1)}});
  auto outcomes = job.Run();

  EXPECT_EQ(outcomes["b1"].status.code(), absl::StatusCode::kInternal) << outcomes["b1"].status;
  for (const auto& id : {"a0", "a1", "b0"}) {
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_EQ(outcomes[id].epoch, spec.epochs()) << id;
    EXPECT_EQ(outcomes[id].step, outcomes["a0"].step) << id;
    EXPECT_TRUE(torch::equal(outcomes[id].params, outcomes["a0"].params)) << id;
  }
  EXPECT_EQ(job.coordinator().generation(), 2);
  const LedgerReplay replay = ExpectEverySampleOnce(job.LedgerContents(), spec.epochs());
  ASSERT_EQ(replay.generation_start_step.count(2), 1u);
  EXPECT_GT(replay.generation_start_step.at(2), 0);
  EXPECT_GE(replay.generation_start_step.at(2), LastReportedStep(job.coordinator(), 1));
}

INSTANTIATE_TEST_SUITE_P(
    IslandModes, IslandHealTest,
    testing::Values(HealCase{"nesterov", "average", 12},
                    // Rounds cross islands over their own groups: the
                    // generation's control communicator (where the fault
                    // is injected) carries fewer calls than in plain averaging.
                    HealCase{"int8_fragments_overlap", "average", 10,
                             [](v1::SyncSpec* s) {
                               s->set_every(4);
                               s->set_fragments(2);
                               s->set_overlap(true);
                               s->set_compression(v1::COMPRESSION_INT8);
                             },
                             /*resume_after_step=*/2}),
    [](const testing::TestParamInfo<HealCase>& info) { return info.param.name; });

// A folder of kSamples 1x8x8 training images (and 64 test images) with
// random pixels and labels: image data for resnet_small.
std::string TinyImageFolder() {
  static const std::string folder = [] {
    const std::string path = MakeTempFolder("tiny_images");
    std::mt19937 random(11);
    for (const auto& [prefix, count] : {std::pair<std::string, uint32_t>{"train", kSamples}, {"t10k", 64}}) {
      std::vector<uint8_t> pixels(count * 64), labels(count);
      for (auto& p : pixels) p = static_cast<uint8_t>(random() % 256);
      for (auto& l : labels) l = static_cast<uint8_t>(random() % 4);
      WriteRawFile(path + "/" + prefix + "-images-idx3-ubyte", IdxBytes({count, 8, 8}, pixels));
      WriteRawFile(path + "/" + prefix + "-labels-idx1-ubyte", IdxBytes({count}, labels));
    }
    return path;
  }();
  return folder;
}

struct BatchNormHealCase {
  std::string name;
  std::string norm;
  std::string mode;
  int64_t fault_call;  // mid-training for this norm and mode
};

class BatchNormHealTest : public testing::TestWithParam<BatchNormHealCase> {};

// Batch norm's running statistics are part of the committed state: a failed
// generation heals them with the parameters, and the job ends bitwise where
// an uninterrupted run ends, buffers included; at the end every rank holds
// the same buffers (norm: batch agrees on rank 0's at commit points).
TEST_P(BatchNormHealTest, FailedGenerationEndsBitwiseWhereAnUninterruptedRunEnds) {
  const BatchNormHealCase& c = GetParam();
  v1::JobSpec spec = Spec(c.mode);
  spec.mutable_model()->set_name("resnet_small");
  spec.mutable_model()->add_widths(8);
  spec.mutable_model()->add_widths(16);
  spec.mutable_model()->set_norm(*ParseSpecName<v1::Norm>(c.norm, "model.norm"));
  spec.mutable_dataset()->Clear();
  spec.mutable_dataset()->set_kind(v1::DATASET_KIND_IDX);
  spec.mutable_dataset()->set_path(TinyImageFolder());
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);

  InProcessJob clean(spec, {"w0", "w1"}, {});
  auto reference = clean.Run();
  ASSERT_TRUE(reference["w0"].status.ok()) << reference["w0"].status;
  ASSERT_TRUE(reference["w1"].status.ok()) << reference["w1"].status;
  InProcessJob faulty(spec, {"w0", "w1"}, {CollectiveFailure(1, c.fault_call, {"w0", "w1"})});
  auto outcomes = faulty.Run();
  for (const auto& id : {"w0", "w1"}) {
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_EQ(outcomes[id].step, reference[id].step) << id;
    EXPECT_TRUE(torch::equal(outcomes[id].params, reference[id].params)) << id << " ends elsewhere";
    ASSERT_EQ(outcomes[id].buffers.size(), reference[id].buffers.size());
    ASSERT_FALSE(outcomes[id].buffers.empty());
    for (size_t i = 0; i < outcomes[id].buffers.size(); ++i) {
      EXPECT_TRUE(torch::equal(outcomes[id].buffers[i], reference[id].buffers[i])) << id << " buffer " << i;
      EXPECT_TRUE(torch::equal(outcomes[id].buffers[i], outcomes["w0"].buffers[i])) << id << " buffer " << i;
    }
  }
  // Training updated the statistics (num_batches_tracked is the third buffer).
  EXPECT_GT(outcomes["w0"].buffers[2].item<int64_t>(), 0);
  EXPECT_EQ(faulty.coordinator().generation(), 2);
  const LedgerReplay replay = ExpectEverySampleOnce(faulty.LedgerContents(), spec.epochs());
  ASSERT_EQ(replay.generation_start_step.count(2), 1u);
  EXPECT_GT(replay.generation_start_step.at(2), 0);
  EXPECT_GT(replay.rolled_back_records, 0) << "the fault came after the last step: nothing was re-run";
}

INSTANTIATE_TEST_SUITE_P(
    Norms, BatchNormHealTest,
    testing::Values(BatchNormHealCase{"batch", "batch", "allreduce", 40},
                    BatchNormHealCase{"sync_batch", "sync_batch", "allreduce", 200},
                    BatchNormHealCase{"batch_average", "batch", "average", 12}),
    [](const testing::TestParamInfo<BatchNormHealCase>& info) { return info.param.name; });

// Kill 1 of 3: the victim's trainer ends mid-step (its connections close);
// the coordinator drops it; the survivors form a generation of 2, heal from
// the newest commit and finish with identical replicas, every sample once.
// cuda_graphs on a CPU job: every generation runs eagerly, says so once
// and counts it by reason; the results are bitwise those without it.
TEST(InProcessTrainers, CudaGraphsOnCpuFallBackToEagerBitwise) {
  const v1::JobSpec plain = Spec("allreduce");
  v1::JobSpec graphs = plain;
  graphs.set_cuda_graphs(true);
  InProcessJob reference(plain, {"w0", "w1"}, {});
  reference.KeepMetrics(true);
  auto expected = reference.Run();
  // A failed generation: the next one falls back (and counts) again.
  InProcessJob asked(graphs, {"w0", "w1"}, {CollectiveFailure(1, 40, {"w0", "w1"})});
  asked.KeepMetrics(true);
  auto outcomes = asked.Run();
  for (const auto& id : {"w0", "w1"}) {
    ASSERT_TRUE(expected[id].status.ok()) << id << ": " << expected[id].status;
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_TRUE(torch::equal(outcomes[id].params, expected[id].params)) << id;
    EXPECT_TRUE(expected[id].cuda_graph_fallbacks.empty()) << id << ": not asked, nothing counted";
    EXPECT_EQ(outcomes[id].cuda_graph_fallbacks, (std::map<std::string, double>{{"cpu_device", 2}})) << id;
    EXPECT_TRUE(outcomes[id].host_step_seconds_exported) << id;
  }
}

TEST(InProcessTrainers, SurvivorsOfALostRankHealAndFinish) {
  const v1::JobSpec spec = Spec("allreduce");
  InProcessJob* job_ptr = nullptr;
  Fault crash{1, 30, {"w2"}, absl::InternalError("injected: the trainer crashed"),
              [&job_ptr] { job_ptr->coordinator().SetMembers({"w0", "w1"}); }};
  InProcessJob job(spec, {"w0", "w1", "w2"}, {crash});
  job_ptr = &job;
  auto outcomes = job.Run();

  EXPECT_EQ(outcomes["w2"].status.code(), absl::StatusCode::kInternal) << outcomes["w2"].status;
  for (const auto& id : {"w0", "w1"}) ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
  EXPECT_EQ(outcomes["w0"].epoch, spec.epochs());
  EXPECT_EQ(outcomes["w0"].step, outcomes["w1"].step);
  EXPECT_TRUE(torch::equal(outcomes["w0"].params, outcomes["w1"].params));
  EXPECT_EQ(job.coordinator().generation(), 2);
  const LedgerReplay replay = ExpectEverySampleOnce(job.LedgerContents(), spec.epochs());
  ASSERT_EQ(replay.generation_start_step.count(2), 1u);
  EXPECT_GE(replay.generation_start_step.at(2), LastReportedStep(job.coordinator(), 1));
}

// A worker left out of a generation (its lease lapsed) keeps its context and
// waits; re-admitted later, it is healed from the members' newer commit, not
// its own older one, and all three end identical with every sample once.
TEST(InProcessTrainers, LeftOutWorkerWaitsAndIsReadmittedWithTheNewestCommit) {
  const v1::JobSpec spec = Spec("allreduce");
  InProcessJob* job_ptr = nullptr;
  auto left_out = [&job_ptr] { job_ptr->coordinator().SetMembers({"w0", "w1"}); };
  auto back = [&job_ptr] { job_ptr->coordinator().SetMembers({"w0", "w1", "w2"}); };
  InProcessJob job(spec, {"w0", "w1", "w2"},
                   {CollectiveFailure(1, 20, {"w0", "w1", "w2"}, left_out), CollectiveFailure(2, 30, {"w0", "w1"}, back)});
  job_ptr = &job;
  auto outcomes = job.Run();

  for (const auto& id : {"w0", "w1", "w2"}) {
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_EQ(outcomes[id].epoch, spec.epochs()) << id;
    EXPECT_EQ(outcomes[id].step, outcomes["w0"].step) << id;
    EXPECT_TRUE(torch::equal(outcomes[id].params, outcomes["w0"].params)) << id;
  }
  EXPECT_EQ(job.coordinator().generation(), 3);
  const LedgerReplay replay = ExpectEverySampleOnce(job.LedgerContents(), spec.epochs());
  ASSERT_EQ(replay.generation_start_step.count(3), 1u);
  // Generation 3 starts from generation 2's commit, past anything w2 held.
  EXPECT_GT(replay.generation_start_step.at(3), replay.generation_start_step.at(2));
  EXPECT_GE(replay.generation_start_step.at(3), LastReportedStep(job.coordinator(), 2));
}

// Faults at random points, not only scripted ones: for each seed, one to
// three generations in a row fail at a random collective (inside a step, a
// round, a commit, the evaluation, the final checks, or the heal of the
// previous fault), on every rank. Whatever the points, the job ends bitwise
// where the uninterrupted run ends and the ledger holds every sample once.
TEST(InProcessTrainers, RandomFaultPointsCostNothing) {
  std::map<std::pair<std::string, int>, std::map<std::string, RankOutcome>> references;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    std::mt19937 random(seed);
    const std::string mode = seed % 2 == 0 ? "average" : "allreduce";
    const int world = 2 + static_cast<int>((seed / 2) % 2);
    std::vector<std::string> workers;
    for (int r = 0; r < world; ++r) workers.push_back(absl::StrCat("w", r));
    const v1::JobSpec spec = Spec(mode);
    auto& reference = references[{mode, world}];
    if (reference.empty()) {
      InProcessJob clean(spec, workers, {});
      reference = clean.Run();
      for (const auto& id : workers) ASSERT_TRUE(reference[id].status.ok()) << id << ": " << reference[id].status;
    }
    // Within the first generation's collectives at either world size (mode
    // average issues far fewer), so at least the first fault always fires.
    const int64_t span = mode == "average" ? 15 : 40;
    std::vector<Fault> faults;
    std::string schedule;
    const int count = 1 + static_cast<int>(random() % 3);
    for (int g = 1; g <= count; ++g) {
      const int64_t call = 1 + static_cast<int64_t>(random() % span);
      faults.push_back(CollectiveFailure(g, call, workers));
      absl::StrAppend(&schedule, " generation ", g, " call ", call, ";");
    }
    SCOPED_TRACE(absl::StrCat("seed ", seed, ": ", mode, ", world ", world, ", faults at", schedule));
    InProcessJob faulty(spec, workers, faults);
    auto outcomes = faulty.Run();
    for (const auto& id : workers) {
      ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
      EXPECT_EQ(outcomes[id].step, reference[id].step) << id;
      EXPECT_TRUE(torch::equal(outcomes[id].params, reference[id].params)) << id << " ends elsewhere";
    }
    EXPECT_GE(faulty.coordinator().generation(), 2);
    ExpectEverySampleOnce(faulty.LedgerContents(), spec.epochs());
  }
}

// sync.shard_optimizer (ZeRO-1): the job's optimizer, and settings on top.
v1::JobSpec ShardedSpec(const std::string& optimizer, bool shard, const std::function<void(v1::JobSpec*)>& tweak = {}) {
  v1::JobSpec spec = Spec("allreduce");
  spec.mutable_optimizer()->set_name(*ParseSpecName<v1::OptimizerName>(optimizer, "optimizer.name"));
  if (optimizer != "sgd") {
    spec.mutable_optimizer()->set_lr(0.01);
    spec.mutable_optimizer()->set_momentum(0);
  }
  if (optimizer == "adamw") spec.mutable_optimizer()->set_weight_decay(0.05);
  spec.mutable_sync()->set_shard_optimizer(shard);
  spec.set_epochs(3);  // room for max_steps 25 at world size 3 (10 steps per epoch)
  if (tweak) tweak(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

std::vector<std::string> Workers(int world) {
  std::vector<std::string> workers;
  for (int r = 0; r < world; ++r) workers.push_back(absl::StrCat("w", r));
  return workers;
}

struct ShardCase {
  std::string name;
  std::string optimizer;
  int world;
  std::function<void(v1::JobSpec*)> tweak;
  // Bitwise unless the summation order provably differs (see the cases).
  bool bitwise = true;
};

class ShardedOptimizerTest : public testing::TestWithParam<ShardCase> {};

// Each rank reduce-scattering the gradients, stepping only its shard of the
// optimizer state and all-gathering the parameters ends where plain
// all-reduce ends: within 1e-5, and in fact bitwise (the
// reduce-scatter sums each element in the all-reduce's order, and each
// element's update is the same arithmetic on the same summed gradient,
// whichever rank does it).
TEST_P(ShardedOptimizerTest, MatchesPlainAllReduce) {
  const ShardCase& c = GetParam();
  const std::vector<std::string> workers = Workers(c.world);
  InProcessJob plain(ShardedSpec(c.optimizer, false, c.tweak), workers, {});
  auto reference = plain.Run();
  InProcessJob sharded(ShardedSpec(c.optimizer, true, c.tweak), workers, {});
  auto outcomes = sharded.Run();
  for (const auto& id : workers) {
    ASSERT_TRUE(reference[id].status.ok()) << id << ": " << reference[id].status;
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_EQ(outcomes[id].step, 25) << id;
    EXPECT_EQ(outcomes[id].step, reference[id].step) << id;
    EXPECT_LE((outcomes[id].params - reference[id].params).abs().max().item<float>(), 1e-5) << id;
    if (c.bitwise) {
      EXPECT_TRUE(torch::equal(outcomes[id].params, reference[id].params)) << id;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, ShardedOptimizerTest,
    testing::Values(ShardCase{"adam_w3", "adam", 3, [](v1::JobSpec* s) { s->set_max_steps(25); }},
                    ShardCase{"adam_w2", "adam", 2, [](v1::JobSpec* s) { s->set_max_steps(25); }},
                    // Clipping needs the global gradient norm; accumulation sums micro-batches.
                    // Within 1e-5 only: with reduce-scattered gradients the float64 sum
                    // of squares is added in another order (per piece, then across
                    // ranks) than over whole gradients, so the float clip scale may
                    // differ in its last bit where the norm lies within ~1e-16 of a
                    // rounding boundary (grad_clip.h). In practice bitwise.
                    ShardCase{"adamw_clip_accumulation_w3", "adamw", 3,
                              [](v1::JobSpec* s) {
                                s->set_max_steps(25);
                                s->set_grad_clip_norm(0.5);
                                s->set_grad_accumulation(2);
                                s->set_batch_size(8);
                              },
                              /*bitwise=*/false},
                    // Accumulation alone stays bitwise.
                    ShardCase{"adamw_accumulation_w3", "adamw", 3,
                              [](v1::JobSpec* s) {
                                s->set_max_steps(25);
                                s->set_grad_accumulation(2);
                                s->set_batch_size(8);
                              }},
                    // A bf16 wire: the reduce-scatter sums bf16 in the all-reduce's order too.
                    ShardCase{"adam_bf16_wire_w3", "adam", 3,
                              [](v1::JobSpec* s) {
                                s->set_max_steps(25);
                                s->mutable_sync()->set_compression(v1::COMPRESSION_BF16);
                              }},
                    ShardCase{"sgd_momentum_w3", "sgd", 3, [](v1::JobSpec* s) { s->set_max_steps(25); }}),
    [](const testing::TestParamInfo<ShardCase>& info) { return info.param.name; });

// A lost rank takes only its live shard: every commit holds the whole
// gathered state, so a fresh worker replacing it (same world size) is healed
// with that rank's shard and the job ends bitwise where an uninterrupted run
// ends.
TEST(InProcessTrainers, ShardedRankLostAndReplacedEndsBitwiseWhereAnUninterruptedRunEnds) {
  const v1::JobSpec spec = ShardedSpec("adam", true);
  InProcessJob clean(spec, Workers(3), {});
  auto reference = clean.Run();
  for (const auto& id : Workers(3)) ASSERT_TRUE(reference[id].status.ok()) << id << ": " << reference[id].status;

  InProcessJob* job_ptr = nullptr;
  Fault crash{1, 30, {"w2"}, absl::InternalError("injected: the trainer crashed"),
              [&job_ptr] { job_ptr->coordinator().SetMembers({"w0", "w1", "w3"}); }};
  InProcessJob job(spec, {"w0", "w1", "w2", "w3"}, {crash});
  job_ptr = &job;
  job.coordinator().SetMembers({"w0", "w1", "w2"});  // w3 waits to replace whoever is lost
  auto outcomes = job.Run();

  EXPECT_EQ(outcomes["w2"].status.code(), absl::StatusCode::kInternal) << outcomes["w2"].status;
  // w3 takes w2's rank.
  const std::map<std::string, std::string> same_rank = {{"w0", "w0"}, {"w1", "w1"}, {"w3", "w2"}};
  for (const auto& [id, ref] : same_rank) {
    ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
    EXPECT_EQ(outcomes[id].step, reference[ref].step) << id;
    EXPECT_TRUE(torch::equal(outcomes[id].params, reference[ref].params)) << id << " ends elsewhere";
  }
  EXPECT_EQ(job.coordinator().generation(), 2);
  const LedgerReplay replay = ExpectEverySampleOnce(job.LedgerContents(), spec.epochs());
  ASSERT_EQ(replay.generation_start_step.count(2), 1u);
  EXPECT_GT(replay.generation_start_step.at(2), 0);
  EXPECT_GE(replay.generation_start_step.at(2), LastReportedStep(job.coordinator(), 1));
}

// Losing a rank for good re-forms a smaller generation: the survivors heal
// from the newest commit (which holds the lost rank's shard), re-shard the
// state over 2 and finish identical, every sample once, no committed step lost.
TEST(InProcessTrainers, ShardedSurvivorsOfALostRankReshardAndFinish) {
  const v1::JobSpec spec = ShardedSpec("adam", true);
  InProcessJob* job_ptr = nullptr;
  Fault crash{1, 30, {"w2"}, absl::InternalError("injected: the trainer crashed"),
              [&job_ptr] { job_ptr->coordinator().SetMembers({"w0", "w1"}); }};
  InProcessJob job(spec, Workers(3), {crash});
  job_ptr = &job;
  auto outcomes = job.Run();

  EXPECT_EQ(outcomes["w2"].status.code(), absl::StatusCode::kInternal) << outcomes["w2"].status;
  for (const auto& id : {"w0", "w1"}) ASSERT_TRUE(outcomes[id].status.ok()) << id << ": " << outcomes[id].status;
  EXPECT_EQ(outcomes["w0"].epoch, spec.epochs());
  EXPECT_TRUE(torch::equal(outcomes["w0"].params, outcomes["w1"].params));
  EXPECT_EQ(job.coordinator().generation(), 2);
  const LedgerReplay replay = ExpectEverySampleOnce(job.LedgerContents(), spec.epochs());
  ASSERT_EQ(replay.generation_start_step.count(2), 1u);
  EXPECT_GT(replay.generation_start_step.at(2), 0);
  EXPECT_GE(replay.generation_start_step.at(2), LastReportedStep(job.coordinator(), 1));
}

// A checkpoint of a sharded run holds the whole optimizer state: written at
// world size 2 and resumed at 3 (every shard re-assigned), it ends bitwise
// where plain all-reduce ends through the same stop and resume.
TEST(InProcessTrainers, ShardedCheckpointResumesAtAnotherWorldSize) {
  constexpr int64_t kStop = 10;
  auto first_leg = [](int64_t max_steps) {
    return [max_steps](v1::JobSpec* s) {
      s->set_max_steps(max_steps);
      s->mutable_checkpoint()->set_interval_steps(5);
    };
  };
  auto run = [&](bool shard) {
    InProcessJob before(ShardedSpec("adam", shard, first_leg(kStop)), Workers(2), {});
    auto stopped = before.Run();
    for (const auto& id : Workers(2)) EXPECT_TRUE(stopped[id].status.ok()) << id << ": " << stopped[id].status;
    auto folders = ListCheckpointFolders(before.checkpoint_root().string(), kJob);
    EXPECT_FALSE(folders.empty());
    if (folders.empty()) return std::map<std::string, RankOutcome>{};
    EXPECT_EQ(folders.front().step, kStop);
    // A new job (no trainer holds a commit) at world size 3 on a copy of the checkpoints.
    InProcessJob after(ShardedSpec("adam", shard, first_leg(25)), Workers(3), {});
    std::filesystem::copy(before.checkpoint_root(), after.checkpoint_root(),
                          std::filesystem::copy_options::recursive);
    after.coordinator().SetCheckpoint(folders.front().relative_path, kStop);
    return after.Run();
  };
  auto plain = run(false);
  auto sharded = run(true);
  for (const auto& id : Workers(3)) {
    ASSERT_TRUE(plain[id].status.ok()) << id << ": " << plain[id].status;
    ASSERT_TRUE(sharded[id].status.ok()) << id << ": " << sharded[id].status;
    EXPECT_EQ(sharded[id].step, 25) << id;
    EXPECT_TRUE(torch::equal(sharded[id].params, plain[id].params)) << id << " ends elsewhere";
  }
}

}  // namespace
}  // namespace herd
