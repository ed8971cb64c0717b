#include "client/format.h"

#include <nlohmann/json.hpp>

#include "client/table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace herd::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::JobInfo SampleJob() {
  v1::JobInfo job;
  job.set_id("job-7");
  job.set_name("mnist");
  job.set_state(v1::RUNNING);
  job.set_step(420);
  job.set_total_steps(1000);
  job.set_epoch(1);
  job.set_world_size(2);
  job.set_generation(3);
  job.set_samples_per_second(5321.4);
  job.set_loss(0.41234);
  (*job.mutable_eval())["accuracy"] = 0.86;
  job.set_created_unix(1000);
  job.set_updated_unix(1290);
  job.add_workers("w1");
  job.add_workers("w2");
  return job;
}

TEST(FormatTest, Durations) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(45.4), "45s");
  EXPECT_EQ(FormatDuration(65), "1m05s");
  EXPECT_EQ(FormatDuration(3600 * 2 + 180), "2h03m");
  EXPECT_EQ(FormatDuration(86400 * 3 + 3600 * 4), "3d04h");
  EXPECT_EQ(FormatDuration(-5), "0s");
  EXPECT_EQ(FormatAge(59), "59s");
  EXPECT_EQ(FormatAge(125), "2m");
  EXPECT_EQ(FormatAge(7300), "2h");
  EXPECT_EQ(FormatAge(90000), "1d");
}

TEST(FormatTest, BytesAndEval) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(5 * 1024 * 1024), "5.0 MiB");
  google::protobuf::Map<std::string, double> eval;
  eval["loss"] = 0.41234;
  eval["accuracy"] = 0.86;
  EXPECT_EQ(FormatEval(eval), "accuracy 0.86 loss 0.4123");
}

TEST(FormatTest, JsonUsesProtoFieldNamesAndPrintsZeros) {
  v1::JobInfo job;
  job.set_id("job-1");
  job.set_state(v1::PENDING);
  job.set_samples_per_second(12.5);
  auto json = ToJson(job);
  ASSERT_TRUE(json.ok());
  EXPECT_THAT(*json, Not(HasSubstr("\n")));  // one line: JSON Lines in watch
  nlohmann::json parsed = nlohmann::json::parse(*json);
  EXPECT_EQ(parsed["id"], "job-1");
  EXPECT_EQ(parsed["state"], "PENDING");
  EXPECT_EQ(parsed["samples_per_second"], 12.5);
  for (const char* field : {"name", "reason", "step", "epoch", "world_size", "generation", "loss", "eval",
                            "total_steps", "samples_in_epoch", "created_unix", "updated_unix", "workers"}) {
    EXPECT_TRUE(parsed.contains(field)) << field;
  }
  EXPECT_FALSE(parsed.contains("worldSize"));
}

TEST(FormatTest, JsonPrintsSixtyFourBitCountersAsNumbers) {
  v1::ListJobsResponse response;
  v1::JobInfo* job = response.add_jobs();
  job->set_step(420);
  job->set_world_size(2);
  job->mutable_spec()->set_seed(7);
  job->mutable_spec()->set_batch_size(64);
  nlohmann::json parsed = nlohmann::json::parse(*ToJson(response));
  EXPECT_EQ(parsed["jobs"][0]["step"], 420);
  EXPECT_TRUE(parsed["jobs"][0]["step"].is_number_integer());
  EXPECT_EQ(parsed["jobs"][0]["world_size"], 2);
  EXPECT_EQ(parsed["jobs"][0]["spec"]["seed"], 7u);
  EXPECT_EQ(parsed["jobs"][0]["spec"]["batch_size"], 64);
}

// The spec's closed sets are enums; `-o json` prints them as the job file
// names them, "" when unset, as when they were strings. Other enums keep
// their constants (state: RUNNING).
TEST(FormatTest, JsonPrintsSpecChoicesByTheirYamlNames) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  job.mutable_spec()->set_device(v1::DEVICE_CUDA);
  job.mutable_spec()->set_on_nonfinite(v1::ON_NONFINITE_SKIP_STEP);
  job.mutable_spec()->mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
  job.mutable_spec()->mutable_sync()->set_same_host_transport(v1::SAME_HOST_TRANSPORT_TCP);
  job.mutable_spec()->mutable_sync()->mutable_outer()->set_kind(v1::OUTER_KIND_NESTEROV);
  job.mutable_spec()->mutable_model()->set_norm(v1::NORM_SYNC_BATCH);
  job.mutable_spec()->mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  job.mutable_spec()->mutable_optimizer()->set_scale_lr(v1::ScaleLr(42));  // a newer coordinator's
  job.mutable_spec()->mutable_checkpoint()->set_keep(3);
  nlohmann::json parsed = nlohmann::json::parse(*ToJson(job));
  EXPECT_EQ(parsed["state"], "RUNNING");
  const nlohmann::json& spec = parsed["spec"];
  EXPECT_EQ(spec["device"], "cuda");
  EXPECT_EQ(spec["on_nonfinite"], "skip_step");
  EXPECT_EQ(spec["sync"]["mode"], "average");
  EXPECT_EQ(spec["sync"]["same_host_transport"], "tcp");
  EXPECT_EQ(spec["sync"]["outer"]["kind"], "nesterov");
  EXPECT_EQ(spec["model"]["norm"], "sync_batch");
  EXPECT_EQ(spec["dataset"]["kind"], "synthetic");
  EXPECT_EQ(spec["optimizer"]["scale_lr"], "42");
  EXPECT_EQ(spec["optimizer"]["name"], "");  // unset
  EXPECT_EQ(spec["sync"]["compression"], "");
  EXPECT_EQ(spec["checkpoint"]["on_failure"], "");
}

TEST(FormatTest, ListResponsesWrapTheirItems) {
  v1::ListJobsResponse response;
  *response.add_jobs() = SampleJob();
  nlohmann::json parsed = nlohmann::json::parse(*ToJson(response));
  ASSERT_TRUE(parsed["jobs"].is_array());
  EXPECT_EQ(parsed["jobs"][0]["id"], "job-7");
  EXPECT_EQ(parsed["jobs"][0]["eval"]["accuracy"], 0.86);
}

TEST(FormatTest, TableColumnsAreAligned) {
  std::string table = FormatTable({"ID", "NAME"}, {{"a", "first"}, {"longer-id", "x"}});
  EXPECT_EQ(table,
            "ID         NAME\n"
            "a          first\n"
            "longer-id  x\n");
}

TEST(FormatTest, JobsTable) {
  v1::JobInfo pending;
  pending.set_id("job-8");
  pending.set_name("new");
  pending.set_state(v1::PENDING);
  pending.set_created_unix(1290);
  pending.set_owner("bob");
  pending.mutable_spec()->set_priority(-5);
  std::string table = JobsTable({SampleJob(), pending}, 1300);
  EXPECT_EQ(table,
            "ID     NAME   OWNER  STATE    PRIO  STEP      EPOCH  WORLD  GEN  SAMPLES/S  LOSS    AGE\n"
            "job-7  mnist  -      RUNNING  0     420/1000  1      2      3    5321       0.4123  5m\n"
            "job-8  new    bob    PENDING  -5    0         0      0      0    -          -       10s\n");
}

// Names, reasons, paths and eval keys come from users and workers; the
// table and detail views print their control characters as escapes.
TEST(FormatTest, ControlCharactersPrintEscaped) {
  v1::JobInfo job = SampleJob();
  job.set_name("x\x1b]0;title\x07");
  job.set_reason("failed\x1b[2J at /data/\x1b[31mred");
  (*job.mutable_eval())["acc\x1b[8m"] = 0.5;
  const std::string table = JobsTable({job}, 1300);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_NE(table.find("x\\x1b]0;title\\x07"), std::string::npos) << table;
  const std::string detail = JobDetail(job, 1300);
  EXPECT_EQ(detail.find('\x1b'), std::string::npos) << detail;
  EXPECT_NE(detail.find("failed\\x1b[2J at /data/\\x1b[31mred"), std::string::npos) << detail;
  EXPECT_NE(detail.find("acc\\x1b[8m 0.5"), std::string::npos) << detail;
  v1::CheckpointInfo checkpoint;
  checkpoint.set_path("job/\x1b[2Jstep-1");
  const std::string checkpoints = CheckpointsTable({checkpoint}, 1300);
  EXPECT_NE(checkpoints.find("job/\\x1b[2Jstep-1"), std::string::npos) << checkpoints;
  // JSON stays exact: a JSON reader gets the original text back.
  auto json = ToJson(job);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(nlohmann::json::parse(*json).value("reason", ""), job.reason());
}

TEST(FormatTest, WorkersAndCheckpointsTables) {
  v1::WorkerInfo worker;
  worker.set_id("w1");
  worker.set_address("10.0.0.1");
  worker.set_device_kind("cuda");
  worker.set_device_count(8);
  worker.set_state(v1::BUSY);
  worker.set_job_id("job-7");
  worker.set_last_heartbeat_unix(1298);
  std::string workers = WorkersTable({worker}, 1300);
  EXPECT_THAT(workers, HasSubstr("ID  ADDRESS   DEVICE   STATE  JOB    HEARTBEAT  LABELS\n"));
  EXPECT_THAT(workers, HasSubstr("w1  10.0.0.1  cuda x8  BUSY   job-7  2s ago     -\n"));
  // Labels in key order.
  (*worker.mutable_labels())["site"] = "us-east";
  (*worker.mutable_labels())["pool"] = "a100";
  EXPECT_THAT(WorkersTable({worker}, 1300), HasSubstr("w1  10.0.0.1  cuda x8  BUSY   job-7  2s ago     pool=a100,site=us-east\n"));
  worker.clear_labels();
  // Cordoned and draining workers say so next to their state.
  worker.set_cordoned(true);
  EXPECT_EQ(WorkerStateLabel(worker), "BUSY,CORDONED");
  worker.set_draining(true);
  EXPECT_EQ(WorkerStateLabel(worker), "BUSY,CORDONED,DRAINING");
  worker.set_cordoned(false);
  worker.set_draining(false);

  v1::CheckpointInfo checkpoint;
  checkpoint.set_id("ckpt-1");
  checkpoint.set_step(200);
  checkpoint.set_size_bytes(3 * 1024 * 1024);
  checkpoint.set_sha256("0123456789abcdef0123");
  checkpoint.set_path("job-7/step-200");
  checkpoint.set_created_unix(1240);
  std::string checkpoints = CheckpointsTable({checkpoint}, 1300);
  EXPECT_THAT(checkpoints, HasSubstr("ckpt-1  200   0      0    3.0 MiB  0123456789ab  1m   job-7/step-200"));
}

TEST(FormatTest, DetailNamesTheTrainedModelToFetch) {
  v1::JobInfo job;
  job.set_id("job-1");
  job.set_state(v1::SUCCEEDED);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Trained model")));
  v1::ModelFile* file = job.add_final_model();
  file->set_name("model-final.safetensors");
  file->set_size_bytes(4 << 20);
  file->set_sha256("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_THAT(JobDetail(job, 0),
              HasSubstr("Trained model:  model-final.safetensors 4.0 MiB sha256 0123456789ab... (herd fetch job-1)"));
}

TEST(FormatTest, DetailShowsAWarning) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Warning:")));
  job.set_warning("checkpoint at step 100 failed: No space left on device");
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("checkpoint at step 100 failed: No space left on device"));
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("Warning:"));
}

TEST(FormatTest, DetailShowsPlacementAndIslands) {
  v1::JobInfo job;
  job.set_state(v1::PENDING);
  job.mutable_spec()->set_min_workers(2);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Placement:")));
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Islands:")));
  (*job.mutable_spec()->mutable_placement()->mutable_require())["site"] = "us-east";
  (*job.mutable_spec()->mutable_placement()->mutable_require())["pool"] = "a100";
  job.mutable_spec()->mutable_sync()->set_islands_by("zone");
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("workers labelled pool=a100,site=us-east"));
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("by worker label zone\n"));
  job.mutable_spec()->mutable_sync()->set_min_workers_per_island(2);
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("by worker label zone, each of at least 2 workers"));
}

TEST(FormatTest, DetailNamesAHungMemberAndItsStep) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Hung:")));
  v1::UnresponsiveMember* member = job.add_unresponsive();
  member->set_worker_id("worker-2");
  member->set_rank(2);
  member->set_generation(3);
  member->set_step(41);
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("Hung:"));
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("worker worker-2 (rank 2 of generation 3) did not answer at step 41; left "
                                           "out until its trainer answers"));
}

// A member in its back-off says how long it is; once its trainer answered,
// when it rejoins. An island that could not be reached says from where.
TEST(FormatTest, DetailShowsTheBackOffOfAMemberLeftOut) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  v1::UnresponsiveMember* member = job.add_unresponsive();
  member->set_worker_id("worker-2");
  member->set_rank(2);
  member->set_generation(3);
  member->set_step(41);
  member->set_since(100);
  member->set_backoff_seconds(20);
  EXPECT_THAT(JobDetail(job, 105), HasSubstr("did not answer at step 41; left out until its trainer answers and its "
                                             "back-off is over (back-off 20 s)"));
  member->set_answered(true);
  EXPECT_THAT(JobDetail(job, 105), HasSubstr("its trainer answered, it rejoins in 15 s (back-off 20 s)"));
  EXPECT_THAT(JobDetail(job, 130), HasSubstr("it rejoins at the next step boundary"));
  member->set_unreachable_from("s0");
  EXPECT_THAT(JobDetail(job, 105), HasSubstr("Unreachable:"));
  EXPECT_THAT(JobDetail(job, 105), ::testing::Not(HasSubstr("Hung:")));
  EXPECT_THAT(JobDetail(job, 105), HasSubstr("worker worker-2 (rank 2 of generation 3) was not reachable from island "
                                             "s0 at step 41; its island is left out"));
}

v1::Straggler Rank2Straggler() {
  v1::Straggler straggler;
  straggler.set_rank(2);
  straggler.set_worker_id("worker-2");
  straggler.set_compute_seconds_per_step(0.041);
  straggler.set_median_compute_seconds_per_step(0.020);
  straggler.set_others_wait_seconds_per_step(0.021);
  straggler.set_step_seconds(0.0437);
  straggler.set_holdback_fraction(0.48);
  return straggler;
}

TEST(FormatTest, DetailListsEveryRank) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  job.set_world_size(3);
  *job.mutable_straggler() = Rank2Straggler();
  job.mutable_straggler()->set_step(180);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("RANK")));  // no ranks reported
  const struct {
    const char* worker;
    double compute, wait;
    int samples, share;
  } ranks[] = {{"worker-0", 0.020, 0.021, 64, 80}, {"worker-1", 0.018, 0.023, 64, 76}, {"worker\x1b-2", 0.041, 0.0004, 64, 36}};
  for (const auto& r : ranks) {
    v1::RankInterval* rank = job.add_ranks();
    rank->set_worker_id(r.worker);
    rank->set_compute_seconds_per_step(r.compute);
    rank->set_wait_seconds_per_step(r.wait);
    rank->set_samples_per_step(r.samples);
    rank->set_batch_share(r.share);
  }
  EXPECT_EQ(RanksTable(job),
            "RANK  WORKER        COMPUTE  WAIT    SHARE\n"
            "0     worker-0      20 ms    21 ms   80 (was 64)\n"
            "1     worker-1      18 ms    23 ms   76 (was 64)\n"
            "2     worker\\x1b-2  41 ms    0.4 ms  36 (was 64)  slowest\n");
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("\nRanks, per step over the log interval before step 180"));
  job.mutable_ranks(1)->set_samples_per_step(76);  // no re-plan: no "was"
  EXPECT_THAT(RanksTable(job), HasSubstr("\n1     worker-1      18 ms    23 ms   76\n"));
  job.mutable_ranks()->RemoveLast();  // not every rank: nothing
  EXPECT_EQ(RanksTable(job), "");
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("RANK")));
}

TEST(FormatTest, DetailNamesTheSlowestRank) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  job.set_world_size(3);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Slowest rank:")));
  *job.mutable_straggler() = Rank2Straggler();
  EXPECT_THAT(JobDetail(job, 0),
              ::testing::ContainsRegex("\nSlowest rank: +2 \\(worker-2\\) 41 ms/step compute vs 20 ms median; the "
                                       "others wait 21 ms/step \\(48% of a step\\)\n"));
  // Not meaningful: one rank, or a job no longer running.
  job.set_world_size(1);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Slowest rank:")));
  job.set_world_size(3);
  job.set_state(v1::SUCCEEDED);
  EXPECT_EQ(FormatStraggler(job), "");
  EXPECT_EQ(FormatStragglerShort(job), "");
}

TEST(FormatTest, StepTimes) {
  EXPECT_EQ(FormatStepTime(0.0025), "2.5 ms");
  EXPECT_EQ(FormatStepTime(0.041), "41 ms");
  EXPECT_EQ(FormatStepTime(12.34), "12.3 s");
}

TEST(FormatTest, DetailShowsTauAndWhatAutoChoseItFrom) {
  v1::JobInfo job;
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Overlap:")));
  job.mutable_sync_state()->set_overlap_steps(4);
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("Overlap:"));
  EXPECT_EQ(FormatOverlap(job), "rounds merge 4 local step(s) after launch");
  job.mutable_sync_state()->set_overlap_auto(true);
  job.mutable_sync_state()->set_overlap_steps(13);
  job.mutable_sync_state()->set_round_seconds(0.9);
  job.mutable_sync_state()->set_step_seconds(0.0713);
  EXPECT_EQ(FormatOverlap(job), "rounds merge 13 local step(s) after launch (overlap_steps auto: a round takes " +
                                    FormatStepTime(0.9) + " in flight, a step " + FormatStepTime(0.0713) + ")");
}

TEST(FormatTest, DetailShowsTheShapeOfInt8Rounds) {
  v1::JobInfo job;
  job.mutable_sync_state()->set_overlap_steps(4);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Rounds:")));
  job.mutable_sync_state()->set_round_shape("all-reduce");
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("Rounds:"));
  EXPECT_EQ(FormatRoundShape(job), "int8, all-reduce (scales, reduce-scatter, all-gather)");
  job.mutable_sync_state()->set_round_shape("gather");
  EXPECT_EQ(FormatRoundShape(job), "int8, gather (one hop: each rank all-gathers its own codes)");
}

TEST(FormatTest, DetailShowsTheCoordinatorsStorageTrouble) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("Storage:")));
  job.set_storage_warning("the coordinator cannot persist this job's state since 2026-11-26 09:00:00 UTC (full)");
  EXPECT_THAT(JobDetail(job, 0),
              ::testing::ContainsRegex("\nStorage: +the coordinator cannot persist this job's state since"));
}

TEST(FormatTest, DetailShowsTheLearningRateAndItsScaling) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("Learning rate:"));
  job.set_learning_rate(0.15);
  job.set_world_size(3);
  job.mutable_spec()->mutable_optimizer()->set_lr(0.05);
  job.mutable_spec()->mutable_optimizer()->set_scale_lr(v1::SCALE_LR_LINEAR);
  EXPECT_THAT(JobDetail(job, 0), HasSubstr("0.15 (optimizer.lr 0.05 scaled linear at world size 3)"));
  job.mutable_spec()->mutable_optimizer()->set_scale_lr(v1::SCALE_LR_NONE);
  EXPECT_THAT(JobDetail(job, 0), ::testing::Not(HasSubstr("scaled")));
}

TEST(FormatTest, DetailShowsReasonAndEval) {
  v1::JobInfo job = SampleJob();
  job.set_state(v1::FAILED);
  job.set_reason("restart budget exhausted");
  job.mutable_spec()->mutable_model()->set_name("mnist_cnn");
  std::string detail = JobDetail(job, 1300);
  EXPECT_THAT(detail, HasSubstr("State:"));
  EXPECT_THAT(detail, HasSubstr("FAILED"));
  EXPECT_THAT(detail, HasSubstr("Reason:"));
  EXPECT_THAT(detail, HasSubstr("restart budget exhausted"));
  EXPECT_THAT(detail, HasSubstr("step 420/1000 (42%)"));
  EXPECT_THAT(detail, HasSubstr("accuracy 0.86"));
  EXPECT_THAT(detail, HasSubstr("w1, w2"));
  EXPECT_THAT(detail, HasSubstr("mnist_cnn"));
  EXPECT_THAT(detail, HasSubstr("1970-01-01 00:16:40 UTC (5m00s ago)"));
}

}  // namespace
}  // namespace herd::client
