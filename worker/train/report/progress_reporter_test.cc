// ProgressReporter against a real gRPC server whose answers the test sets.
#include "worker/train/report/progress_reporter.h"

#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/rpc_options.h"
#include "worker/train/generation/cluster_client.h"

namespace herd {
namespace {

class FakeCluster final : public v1::ClusterService::Service {
 public:
  grpc::Status ReportProgress(grpc::ServerContext*, const v1::ReportProgressRequest* request,
                              v1::ReportProgressResponse* response) override {
    absl::MutexLock lock(&mu_);
    received_.push_back(request->step());
    mu_.Await(absl::Condition(+[](bool* open) { return *open; }, &open_));
    if (unavailable_left_ > 0) {
      --unavailable_left_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down for now");
    }
    if (request->generation() < current_generation_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "superseded");
    }
    acknowledged_.push_back(request->step());
    response->set_cancelled(cancelled_);
    return grpc::Status::OK;
  }
  grpc::Status CommitCheckpoint(grpc::ServerContext*, const v1::CommitCheckpointRequest* request,
                                v1::CommitCheckpointResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (unavailable_left_ > 0) {
      --unavailable_left_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down for now");
    }
    response->mutable_checkpoint()->set_step(request->step());
    response->add_delete_paths("job/step-old");
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int unavailable_left_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t current_generation_ ABSL_GUARDED_BY(mu_) = 1;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> received_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> acknowledged_ ABSL_GUARDED_BY(mu_);
};

class ProgressReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    client_ = std::make_unique<ClusterClient>(*MakeChannel("127.0.0.1:" + std::to_string(port)),
                                              ClusterClientOptions{"job", "w0", ""});
  }
  void TearDown() override { server_->Shutdown(); }

  static v1::ReportProgressRequest Report(int64_t step, int64_t generation = 1) {
    v1::ReportProgressRequest report;
    report.set_job_id("job");
    report.set_generation(generation);
    report.set_step(step);
    return report;
  }

  FakeCluster service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ClusterClient> client_;
  ProgressReporter::Options fast_{std::chrono::milliseconds(10)};
};

TEST_F(ProgressReporterTest, PostingNeverWaitsForAStalledCoordinatorAndTheLatestReportWins) {
  ProgressReporter reporter(client_.get(), nullptr, fast_);
  {
    absl::MutexLock lock(&service_.mu_);
    service_.open_ = false;  // the coordinator hangs (SIGSTOP)
  }
  reporter.PostProgress(Report(10));
  {
    // The call carrying step 10 has reached the hung coordinator.
    absl::MutexLock lock(&service_.mu_);
    service_.mu_.Await(absl::Condition(
        +[](std::vector<int64_t>* received) { return !received->empty(); }, &service_.received_));
  }
  // Posts return at once while the call to the hung coordinator is in flight.
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 11; step <= 20; ++step) reporter.PostProgress(Report(step));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_FALSE(reporter.Flush(std::chrono::milliseconds(50)));
  {
    absl::MutexLock lock(&service_.mu_);
    service_.open_ = true;
  }
  ASSERT_TRUE(reporter.Flush(std::chrono::seconds(10)));
  absl::MutexLock lock(&service_.mu_);
  // The one in flight, then only the newest of the ten posted meanwhile.
  EXPECT_EQ(service_.acknowledged_, (std::vector<int64_t>{10, 20}));
}

TEST_F(ProgressReporterTest, AFailedReportIsRetriedUntilAcknowledged) {
  {
    absl::MutexLock lock(&service_.mu_);
    service_.unavailable_left_ = 3;
  }
  ProgressReporter reporter(client_.get(), nullptr, fast_);
  reporter.PostProgress(Report(7));
  ASSERT_TRUE(reporter.Flush(std::chrono::seconds(10)));
  absl::MutexLock lock(&service_.mu_);
  EXPECT_EQ(service_.received_, (std::vector<int64_t>{7, 7, 7, 7}));
  EXPECT_EQ(service_.acknowledged_, (std::vector<int64_t>{7}));
}

TEST_F(ProgressReporterTest, FencingAndCancellationReachTheStepLoop) {
  ProgressReporter reporter(client_.get(), nullptr, fast_);
  EXPECT_EQ(reporter.fenced_generation(), -1);
  {
    absl::MutexLock lock(&service_.mu_);
    service_.current_generation_ = 2;
  }
  reporter.PostProgress(Report(5, /*generation=*/1));
  ASSERT_TRUE(reporter.Flush(std::chrono::seconds(10)));
  EXPECT_EQ(reporter.fenced_generation(), 1);
  EXPECT_FALSE(reporter.cancelled());
  {
    absl::MutexLock lock(&service_.mu_);
    service_.cancelled_ = true;
  }
  reporter.PostProgress(Report(6, /*generation=*/2));
  ASSERT_TRUE(reporter.Flush(std::chrono::seconds(10)));
  EXPECT_TRUE(reporter.cancelled());
}

TEST_F(ProgressReporterTest, EveryCheckpointRecordIsDeliveredInOrderAndItsAnswerHandled) {
  {
    absl::MutexLock lock(&service_.mu_);
    service_.unavailable_left_ = 2;
  }
  std::vector<int64_t> recorded;  // written on the reporter's thread, read after Flush
  ProgressReporter reporter(
      client_.get(),
      [&recorded](const v1::CommitCheckpointResponse& response) {
        recorded.push_back(response.checkpoint().step());
        EXPECT_EQ(response.delete_paths(0), "job/step-old");
      },
      fast_);
  for (int64_t step : {100, 200, 300}) {
    v1::CommitCheckpointRequest record;
    record.set_generation(1);
    record.set_step(step);
    reporter.PostCheckpoint(record);
  }
  ASSERT_TRUE(reporter.Flush(std::chrono::seconds(10)));
  EXPECT_EQ(recorded, (std::vector<int64_t>{100, 200, 300}));
}

}  // namespace
}  // namespace herd
