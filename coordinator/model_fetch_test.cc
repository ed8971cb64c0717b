#include "coordinator/model_fetch.h"

#include <gtest/gtest.h>

namespace herd::coordinator {
namespace {

v1::JobInfo SucceededJob() {
  v1::JobInfo job;
  job.set_id("job-7");
  job.set_state(v1::SUCCEEDED);
  job.add_workers("w0");
  job.add_workers("w1");
  v1::ModelFile* file = job.add_final_model();
  file->set_name("model-final.safetensors");
  return job;
}

v1::WorkerInfo Worker(const std::string& id, v1::WorkerState state) {
  v1::WorkerInfo worker;
  worker.set_id(id);
  worker.set_state(state);
  return worker;
}

v1::FetchModelFileRequest Ask(int64_t step, const std::string& file) {
  v1::FetchModelFileRequest request;
  request.set_job_id("job-7");
  request.set_checkpoint_step(step);
  request.set_file(file);
  return request;
}

TEST(ModelFetch, TheFinalModelComesFromTheLastGenerationsMembers) {
  auto plan = PlanModelFetch(Ask(0, "model-final.safetensors"), SucceededJob(), {},
                             {Worker("w2", v1::IDLE), Worker("w0", v1::IDLE)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->workers, (std::vector<std::string>{"w0", "w1"}));
  EXPECT_EQ(plan->ask.job_id(), "job-7");
  EXPECT_EQ(plan->ask.file(), "model-final.safetensors");
  EXPECT_EQ(plan->ask.checkpoint_path(), "");
}

TEST(ModelFetch, OnlyTheFinalModelFilesAreServedFromTheJobDir) {
  for (const char* file : {"trainer.log", "../../etc/shadow", "", "model-final.pt/.."}) {
    auto plan = PlanModelFetch(Ask(0, file), SucceededJob(), {}, {});
    EXPECT_TRUE(absl::IsInvalidArgument(plan.status())) << file << ": " << plan.status();
  }
}

TEST(ModelFetch, AJobWithoutAFinalModelIsRefusedNamingItsState) {
  v1::JobInfo running = SucceededJob();
  running.set_state(v1::RUNNING);
  running.clear_final_model();
  auto plan = PlanModelFetch(Ask(0, "model-final.pt"), running, {}, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(plan.status())) << plan.status();
  EXPECT_EQ(plan.status().message(),
            "job job-7 has no final model: it is RUNNING and only a job that succeeded has one");
}

TEST(ModelFetch, ACheckpointIsAskedOfMembersThenEveryLiveWorker) {
  v1::CheckpointInfo checkpoint;
  checkpoint.set_step(40);
  checkpoint.set_path("job-7/step-0000000040");
  auto plan = PlanModelFetch(Ask(40, "MANIFEST"), SucceededJob(), {checkpoint},
                             {Worker("w1", v1::IDLE), Worker("w3", v1::DEAD), Worker("w2", v1::BUSY)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->workers, (std::vector<std::string>{"w0", "w1", "w2"}));
  EXPECT_EQ(plan->ask.checkpoint_path(), "job-7/step-0000000040");
  EXPECT_EQ(plan->ask.file(), "MANIFEST");

  auto escape = PlanModelFetch(Ask(40, "../../step-1/MANIFEST"), SucceededJob(), {checkpoint}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(escape.status())) << escape.status();
}

TEST(ModelFetch, AnUnrecordedStepIsNotFoundListingTheRecordedOnes) {
  v1::CheckpointInfo checkpoint;
  checkpoint.set_step(40);
  checkpoint.set_path("job-7/step-0000000040");
  auto plan = PlanModelFetch(Ask(30, "MANIFEST"), SucceededJob(), {checkpoint}, {});
  EXPECT_TRUE(absl::IsNotFound(plan.status()));
  EXPECT_EQ(plan.status().message(), "job job-7 has no recorded checkpoint of step 30 (recorded: 40)");
}

TEST(ModelFetch, NoWorkerHoldingItNamesTheJobTheFileAndEachAnswer) {
  auto plan = PlanModelFetch(Ask(0, "model-final.safetensors"), SucceededJob(), {}, {});
  ASSERT_TRUE(plan.ok());
  absl::Status status = NoWorkerHolds(*plan, {"worker w0 has no file", "worker w1 is not connected"});
  EXPECT_TRUE(absl::IsNotFound(status));
  EXPECT_EQ(status.message(),
            "no worker holds model-final.safetensors of job job-7 any more (worker w0 has no file; worker w1 is not "
            "connected)");
}

}  // namespace
}  // namespace herd::coordinator
