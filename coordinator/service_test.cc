// The coordinator's gRPC services end to end, over real sockets on 127.0.0.1.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#include "common/auth.h"
#include "common/sha256.h"
#include "common/grpc_serving.h"
#include "common/rpc_options.h"
#include "coordinator/server.h"
#include "coordinator/testing/gated_store.h"
#include "proto/herd.grpc.pb.h"

namespace herd::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kToken[] = "s3cret-token";

// A plain HTTP/1.0 GET, enough to scrape /metrics.
std::string HttpGet(const std::string& address, const std::string& path) {
  size_t colon = address.rfind(':');
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &target.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
    close(fd);
    return "";
  }
  std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  send(fd, request.data(), request.size(), 0);
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) response.append(buffer, n);
  close(fd);
  return response;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions& options = options_;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = MetricsListen();
    options.store.state_dir =
        ::testing::TempDir() + "/service_test/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(options.store.state_dir);
    std::filesystem::create_directories(std::filesystem::path(options.store.state_dir).parent_path());
    // The token is an admin's: these tests call both services with it.
    options.auth_file = options.store.state_dir + ".auth";
    {
      std::ofstream(options.auth_file) << "ops admin sha256:" << Sha256Hex(kToken) << "\n";
      std::filesystem::permissions(options.auth_file, std::filesystem::perms::owner_read |
                                                          std::filesystem::perms::owner_write);
    }
    options.clock = &clock_;
    options.max_rpc_threads = MaxRpcThreads();
    options.wrap_store = WrapStore();
    options.coordinator.run_ticker = false;  // the test decides when scheduling happens
    options.job_service.watch_poll = absl::Milliseconds(50);
    // A reader's session waits while the test plays (or not yet) the daemon.
    options.log_relay.attach_timeout = absl::Seconds(60);
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel = MakeChannel(server_->listen_address());
    ASSERT_TRUE(channel.ok()) << channel.status();
    jobs_ = v1::JobService::NewStub(*channel);
    cluster_ = v1::ClusterService::NewStub(*channel);
  }

  // Off unless a test scrapes it: stopping the HTTP server takes seconds.
  virtual std::string MetricsListen() const { return ""; }
  // gRPC's threads for synchronous calls (0: no cap).
  virtual int MaxRpcThreads() const { return 0; }
  // Around the real SQLite store (none: the store as opened).
  virtual std::function<std::unique_ptr<StateStore>(std::unique_ptr<StateStore>)> WrapStore() { return nullptr; }

  static std::unique_ptr<grpc::ClientContext> Call(const std::string& token = kToken) {
    return NewCallContext(token, std::chrono::seconds(10));
  }

  static v1::JobSpec Spec(int64_t min_workers) {
    v1::JobSpec spec;
    spec.mutable_model()->set_name("mlp");
    spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
    spec.set_batch_size(16);
    spec.set_min_workers(min_workers);
    return spec;
  }

  std::string Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    grpc::Status status = jobs_->SubmitJob(Call().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.job().id();
  }

  void Register(const std::string& id, const std::string& address) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(address);
    request.set_device_kind("cpu");
    request.set_device_count(1);
    v1::RegisterWorkerResponse response;
    grpc::Status status = cluster_->RegisterWorker(Call().get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_DOUBLE_EQ(response.lease_seconds(), 10);
    EXPECT_DOUBLE_EQ(response.heartbeat_interval_seconds(), 1);
  }

  v1::HeartbeatResponse Heartbeat(const std::string& id) {
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    v1::HeartbeatResponse response;
    grpc::Status status = cluster_->Heartbeat(Call().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  v1::JoinGenerationResponse Join(const std::string& job_id, const std::string& worker_id) {
    v1::JoinGenerationRequest request;
    request.set_job_id(job_id);
    request.set_worker_id(worker_id);
    request.set_wait_ms(1000);
    v1::JoinGenerationResponse response;
    grpc::Status status = cluster_->JoinGeneration(Call().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  FakeClock clock_;
  ServerOptions options_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
};

// A call a test sends without waiting for its answer.
template <typename Request, typename Response>
struct PendingCall {
  std::unique_ptr<grpc::ClientContext> context = NewCallContext(kToken, std::chrono::seconds(60));
  Request request;
  Response response;
  grpc::Status status;
};

// Counts answers to PendingCalls; before it goes, cancels those still
// open and waits for their answers, so that no call outlives its own.
class Answered {
 public:
  explicit Answered(std::function<void()> cancel_all) : cancel_all_(std::move(cancel_all)) {}
  ~Answered() {
    cancel_all_();
    int sent;
    {
      absl::MutexLock lock(&mu_);
      sent = sent_;
    }
    AtLeast(sent);
  }
  // The callback for one more call's answer.
  std::function<void(grpc::Status)> Callback(grpc::Status* status) {
    absl::MutexLock lock(&mu_);
    ++sent_;
    return [this, status](grpc::Status answer) {
      absl::MutexLock lock(&mu_);
      *status = std::move(answer);
      ++answered_;
    };
  }
  int Count() {
    absl::MutexLock lock(&mu_);
    return answered_;
  }
  // True once `count` calls are answered; false after 60 s.
  bool AtLeast(int count) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return answered_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(60));
  }

 private:
  const std::function<void()> cancel_all_;
  absl::Mutex mu_;
  int sent_ ABSL_GUARDED_BY(mu_) = 0;
  int answered_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(ServiceTest, MissingOrWrongTokenIsUnauthenticated) {
  v1::ListJobsResponse jobs;
  EXPECT_EQ(jobs_->ListJobs(Call("").get(), {}, &jobs).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(jobs_->ListJobs(Call("wrong").get(), {}, &jobs).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_worker_id("w1");
  v1::HeartbeatResponse response;
  EXPECT_EQ(cluster_->Heartbeat(Call("wrong").get(), heartbeat, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Nothing an unauthenticated caller sent took effect.
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = Spec(1);
  v1::SubmitJobResponse submitted;
  EXPECT_EQ(jobs_->SubmitJob(Call("").get(), submit, &submitted).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(jobs_->ListJobs(Call().get(), {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

// Two coordinators on one state dir would schedule the same workers.
// JoinGeneration reads its request's bytes itself: bytes that are no
// request get INVALID_ARGUMENT naming it.
TEST_F(ServiceTest, AJoinRequestThatDoesNotParseIsInvalidArgument) {
  auto channel = MakeChannel(server_->listen_address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  grpc::GenericStub stub(*channel);
  grpc::Slice garbage(std::string("\xff\xff\xff\xff", 4));
  grpc::ByteBuffer request(&garbage, 1);
  grpc::ByteBuffer response;
  absl::Notification answered;
  grpc::Status status;
  auto context = Call();
  stub.UnaryCall(context.get(), "/herd.v1.ClusterService/JoinGeneration", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   answered.Notify();
                 });
  answered.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(), "JoinGeneration: the request is not a valid JoinGenerationRequest");
}

TEST_F(ServiceTest, SecondCoordinatorOnTheSameStateDirIsRefused) {
  ServerOptions other = options_;
  other.listen = "127.0.0.1:0";
  auto second = CoordinatorServer::Start(other);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another coordinator"));
  EXPECT_THAT(second.status().message(), HasSubstr(options_.store.state_dir));
  // The first one is unaffected.
  EXPECT_EQ(CheckHealth(*MakeChannel(server_->listen_address()), "", std::chrono::seconds(5)).value_or(false), true);
}

// gRPC would share the port (SO_REUSEPORT) and split connections between two
// coordinators.
TEST_F(ServiceTest, SecondCoordinatorOnAUsedPortIsRefused) {
  ServerOptions other = options_;
  other.store.state_dir += "-other";
  std::filesystem::remove_all(other.store.state_dir);
  other.listen = server_->listen_address();
  auto second = CoordinatorServer::Start(other);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen on " + server_->listen_address()));
  // Its state dir lock went with it: a coordinator on a free port starts there.
  other.listen = "127.0.0.1:0";
  EXPECT_TRUE(CoordinatorServer::Start(other).ok());
}

// The standard health service answers without a token (probes carry none).
TEST_F(ServiceTest, ServesTheStandardHealthService) {
  auto channel = MakeChannel(server_->listen_address());
  ASSERT_TRUE(channel.ok());
  auto serving = CheckHealth(*channel, "", std::chrono::seconds(5));
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  auto unknown = CheckHealth(*channel, "no.such.Service", std::chrono::seconds(5));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
}

TEST_F(ServiceTest, BadSpecIsInvalidArgumentNamingTheField) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = Spec(1);
  request.mutable_spec()->mutable_optimizer()->set_lr(-1);
  v1::SubmitJobResponse response;
  grpc::Status status = jobs_->SubmitJob(Call().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), StartsWith("optimizer.lr"));
}

TEST_F(ServiceTest, UnknownJobIsNotFound) {
  v1::GetJobRequest request;
  request.set_id("job-00000000");
  v1::GetJobResponse response;
  EXPECT_EQ(jobs_->GetJob(Call().get(), request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, TwoWorkersRendezvousAsRanksOfGenerationOne) {
  Register("w1", "10.0.0.1");
  Register("w2", "10.0.0.2");
  const std::string job_id = Submit(Spec(2));
  server_->coordinator().Tick();

  v1::HeartbeatResponse w1 = Heartbeat("w1");
  v1::HeartbeatResponse w2 = Heartbeat("w2");
  ASSERT_EQ(w1.assignments_size(), 1);
  ASSERT_EQ(w2.assignments_size(), 1);
  EXPECT_EQ(w1.assignments(0).job_id(), job_id);
  EXPECT_EQ(w1.assignments(0).generation(), 1);
  EXPECT_EQ(w1.assignments(0).rank(), 0);
  EXPECT_EQ(w2.assignments(0).generation(), 1);
  EXPECT_EQ(w2.assignments(0).rank(), 1);

  v1::JoinGenerationResponse join1 = Join(job_id, "w1");
  v1::JoinGenerationResponse join2 = Join(job_id, "w2");
  EXPECT_EQ(join1.generation(), 1);
  EXPECT_EQ(join2.generation(), 1);
  EXPECT_EQ(join1.kv_prefix(), job_id + "/1/");
  EXPECT_EQ(join2.kv_prefix(), join1.kv_prefix());
  EXPECT_EQ(join2.rank(), 1);
  EXPECT_EQ(join2.world_size(), 2);
  ASSERT_EQ(join2.peers_size(), 2);
  EXPECT_EQ(join2.peers(0).address(), "10.0.0.1");
  EXPECT_EQ(join2.peers(1).worker_id(), "w2");

  // Rank 0 publishes, rank 1 reads it in the same generation.
  v1::KvSetRequest set;
  set.set_job_id(job_id);
  set.set_generation(1);
  set.set_key(join1.kv_prefix() + "nccl_id");
  set.set_value(std::string("\x00\x01binary", 8));
  v1::KvSetResponse set_response;
  ASSERT_TRUE(cluster_->KvSet(Call().get(), set, &set_response).ok());
  v1::KvGetRequest get;
  get.set_job_id(job_id);
  get.set_generation(1);
  get.set_key(set.key());
  get.set_wait_ms(1000);
  v1::KvGetResponse got;
  ASSERT_TRUE(cluster_->KvGet(Call().get(), get, &got).ok());
  EXPECT_EQ(got.value(), set.value());

  // A stale generation is fenced.
  set.set_generation(2);
  grpc::Status stale = cluster_->KvSet(Call().get(), set, &set_response);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(stale.error_message(), "job " + job_id + ": generation 2 is not current (current: 1)");

  get.set_key("absent");
  get.set_wait_ms(20);
  EXPECT_EQ(cluster_->KvGet(Call().get(), get, &got).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  v1::KvAddRequest add;
  add.set_job_id(job_id);
  add.set_generation(1);
  add.set_key("arrived");
  add.set_delta(1);
  v1::KvAddResponse added;
  ASSERT_TRUE(cluster_->KvAdd(Call().get(), add, &added).ok());
  ASSERT_TRUE(cluster_->KvAdd(Call().get(), add, &added).ok());
  EXPECT_EQ(added.value(), 2);
}

TEST_F(ServiceTest, ReportedFailureStartsNextGenerationAndFencesEveryCallOfTheOldOne) {
  Register("w1", "10.0.0.1");
  Register("w2", "10.0.0.2");
  const std::string job_id = Submit(Spec(2));
  server_->coordinator().Tick();
  ASSERT_EQ(Join(job_id, "w1").generation(), 1);
  ASSERT_EQ(Join(job_id, "w2").generation(), 1);

  v1::ReportProgressRequest progress;
  progress.set_job_id(job_id);
  progress.set_generation(1);
  progress.set_rank(0);
  progress.set_step(40);
  progress.set_epoch(2);
  progress.set_samples_in_epoch(1280);
  v1::ReportProgressResponse progress_response;
  ASSERT_TRUE(cluster_->ReportProgress(Call().get(), progress, &progress_response).ok());

  v1::ReportFailureRequest failure;
  failure.set_job_id(job_id);
  failure.set_generation(1);
  failure.set_rank(1);
  failure.set_worker_id("w2");
  failure.set_message("gloo allreduce: timed out after 5000 ms");
  v1::ReportFailureResponse failure_response;
  grpc::Status reported = cluster_->ReportFailure(Call().get(), failure, &failure_response);
  ASSERT_TRUE(reported.ok()) << reported.error_message();

  // Every generation-scoped call for generation 1 is now refused.
  const std::string fenced = "job " + job_id + ": generation 1 is not current (current: 2)";
  auto expect_fenced = [&](const grpc::Status& status, const char* rpc) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << rpc;
    EXPECT_EQ(status.error_message(), fenced) << rpc;
  };
  v1::KvSetRequest set;
  set.set_job_id(job_id);
  set.set_generation(1);
  set.set_key("k");
  v1::KvSetResponse set_response;
  expect_fenced(cluster_->KvSet(Call().get(), set, &set_response), "KvSet");
  v1::KvGetRequest get;
  get.set_job_id(job_id);
  get.set_generation(1);
  get.set_key("k");
  v1::KvGetResponse get_response;
  expect_fenced(cluster_->KvGet(Call().get(), get, &get_response), "KvGet");
  v1::KvAddRequest add;
  add.set_job_id(job_id);
  add.set_generation(1);
  add.set_key("n");
  add.set_delta(1);
  v1::KvAddResponse add_response;
  expect_fenced(cluster_->KvAdd(Call().get(), add, &add_response), "KvAdd");
  expect_fenced(cluster_->ReportProgress(Call().get(), progress, &progress_response), "ReportProgress");
  v1::CommitCheckpointRequest checkpoint;
  checkpoint.set_job_id(job_id);
  checkpoint.set_generation(1);
  checkpoint.set_step(40);
  checkpoint.set_path(job_id + "/step-40");
  v1::CommitCheckpointResponse checkpoint_response;
  expect_fenced(cluster_->CommitCheckpoint(Call().get(), checkpoint, &checkpoint_response), "CommitCheckpoint");
  failure.set_worker_id("w1");
  failure.set_rank(0);
  expect_fenced(cluster_->ReportFailure(Call().get(), failure, &failure_response), "ReportFailure");

  // Both members (the reporter included) join generation 2 and resume from
  // the committed state, healed by the ranks from the newest commit.
  v1::JoinGenerationResponse join1 = Join(job_id, "w1");
  v1::JoinGenerationResponse join2 = Join(job_id, "w2");
  EXPECT_EQ(join1.generation(), 2);
  EXPECT_EQ(join2.generation(), 2);
  EXPECT_EQ(join2.rank(), 1);
  EXPECT_EQ(join2.kv_prefix(), job_id + "/2/");
  EXPECT_EQ(join2.start_step(), 40);
  EXPECT_EQ(Heartbeat("w1").assignments(0).generation(), 2);
  set.set_generation(2);
  EXPECT_TRUE(cluster_->KvSet(Call().get(), set, &set_response).ok());

  // A worker that is not a member gets no place: it waits to be admitted
  // and is told so when its wait ends.
  Register("w9", "10.0.0.9");
  v1::JoinGenerationRequest outsider;
  outsider.set_job_id(job_id);
  outsider.set_worker_id("w9");
  outsider.set_wait_ms(100);
  v1::JoinGenerationResponse outsider_response;
  grpc::Status refused = cluster_->JoinGeneration(Call().get(), outsider, &outsider_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(refused.error_message(), HasSubstr("w9 is not a member of job " + job_id + " generation 2"));

  v1::GetJobRequest get_job;
  get_job.set_id(job_id);
  v1::GetJobResponse job;
  ASSERT_TRUE(jobs_->GetJob(Call().get(), get_job, &job).ok());
  EXPECT_EQ(job.job().generation(), 2);
  EXPECT_EQ(job.job().state(), v1::RUNNING);
}

// Reports and records that no trainer would send are refused at the RPC,
// naming the field and the value, and change nothing.
TEST_F(ServiceTest, MalformedProgressAndCheckpointRecordsAreRefusedNamingFieldAndValue) {
  Register("w1", "10.0.0.1");
  const std::string job_id = Submit(Spec(1));
  server_->coordinator().Tick();
  ASSERT_EQ(Join(job_id, "w1").generation(), 1);

  auto report = [&](auto spoil) {
    v1::ReportProgressRequest progress;
    progress.set_job_id(job_id);
    progress.set_generation(1);
    progress.set_step(10);
    spoil(progress);
    v1::ReportProgressResponse response;
    return cluster_->ReportProgress(Call().get(), progress, &response);
  };
  grpc::Status negative = report([](v1::ReportProgressRequest& p) { p.set_step(-5); });
  EXPECT_EQ(negative.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(negative.error_message(), "step: must be >= 0, got -5");
  grpc::Status nan_rate = report([](v1::ReportProgressRequest& p) { p.set_samples_per_second(std::nan("")); });
  EXPECT_EQ(nan_rate.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(nan_rate.error_message(), "samples_per_second: must be a finite number >= 0, got nan");
  grpc::Status inf_lr = report([](v1::ReportProgressRequest& p) { p.set_learning_rate(HUGE_VAL); });
  EXPECT_EQ(inf_lr.error_message(), "learning_rate: must be a finite number >= 0, got inf");
  grpc::Status epoch = report([](v1::ReportProgressRequest& p) { p.set_epoch(-1); });
  EXPECT_EQ(epoch.error_message(), "epoch: must be >= 0, got -1");
  grpc::Status position = report([](v1::ReportProgressRequest& p) { p.set_samples_in_epoch(-7); });
  EXPECT_EQ(position.error_message(), "samples_in_epoch: must be >= 0, got -7");
  // A diverged loss is a measurement, not malformed: stored as reported.
  ASSERT_TRUE(report([](v1::ReportProgressRequest& p) { p.set_loss(std::nan("")); }).ok());

  v1::CommitCheckpointRequest record;
  record.set_job_id(job_id);
  record.set_generation(1);
  record.set_step(10);
  record.set_path(job_id + "/step-10");
  record.set_size_bytes(-1);
  v1::CommitCheckpointResponse recorded;
  grpc::Status size = cluster_->CommitCheckpoint(Call().get(), record, &recorded);
  EXPECT_EQ(size.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(size.error_message(), "size_bytes: must be >= 0, got -1");

  v1::GetJobRequest get;
  get.set_id(job_id);
  v1::GetJobResponse job;
  ASSERT_TRUE(jobs_->GetJob(Call().get(), get, &job).ok());
  EXPECT_EQ(job.job().step(), 10);
  EXPECT_TRUE(std::isnan(job.job().loss()));
  v1::ListCheckpointsRequest list;
  list.set_job_id(job_id);
  v1::ListCheckpointsResponse checkpoints;
  ASSERT_TRUE(jobs_->ListCheckpoints(Call().get(), list, &checkpoints).ok());
  EXPECT_EQ(checkpoints.checkpoints_size(), 0);
}

TEST_F(ServiceTest, WatchJobStreamsChangesUntilCancelled) {
  const std::string job_id = Submit(Spec(1));
  auto watch_context = Call();
  v1::WatchJobRequest request;
  request.set_id(job_id);
  auto stream = jobs_->WatchJob(watch_context.get(), request);
  v1::WatchJobEvent event;
  ASSERT_TRUE(stream->Read(&event));
  EXPECT_EQ(event.job().state(), v1::PENDING);

  Register("w1", "10.0.0.1");
  server_->coordinator().Tick();
  ASSERT_TRUE(stream->Read(&event));
  EXPECT_EQ(event.job().state(), v1::RUNNING);
  EXPECT_EQ(event.job().generation(), 1);

  v1::ReportProgressRequest progress;
  progress.set_job_id(job_id);
  progress.set_generation(1);
  progress.set_rank(0);
  progress.set_step(7);
  progress.set_loss(1.5);
  v1::ReportProgressResponse progress_response;
  ASSERT_TRUE(cluster_->ReportProgress(Call().get(), progress, &progress_response).ok());
  EXPECT_FALSE(progress_response.cancelled());
  ASSERT_TRUE(stream->Read(&event));
  EXPECT_EQ(event.job().step(), 7);

  v1::CancelJobRequest cancel;
  cancel.set_id(job_id);
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(jobs_->CancelJob(Call().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.job().state(), v1::CANCELLED);
  ASSERT_TRUE(stream->Read(&event));
  EXPECT_EQ(event.job().state(), v1::CANCELLED);
  EXPECT_EQ(event.job().reason(), "cancelled by user");
  EXPECT_FALSE(stream->Read(&event));
  EXPECT_TRUE(stream->Finish().ok());

  ASSERT_TRUE(cluster_->ReportProgress(Call().get(), progress, &progress_response).ok());
  EXPECT_TRUE(progress_response.cancelled());
  grpc::Status again = jobs_->CancelJob(Call().get(), cancel, &cancelled);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(again.error_message(), HasSubstr("CANCELLED"));
}

TEST_F(ServiceTest, WatchEndsWhenTheClientCancels) {
  const std::string job_id = Submit(Spec(1));
  auto watch_context = Call();
  v1::WatchJobRequest request;
  request.set_id(job_id);
  auto stream = jobs_->WatchJob(watch_context.get(), request);
  v1::WatchJobEvent event;
  ASSERT_TRUE(stream->Read(&event));
  watch_context->TryCancel();
  EXPECT_FALSE(stream->Read(&event));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

class ServiceWithMetricsTest : public ServiceTest {
 protected:
  std::string MetricsListen() const override { return "127.0.0.1:0"; }
};

TEST_F(ServiceWithMetricsTest, MetricsEndpointCountsRpcsByMethodAndCode) {
  Submit(Spec(1));
  v1::ListJobsResponse jobs;
  jobs_->ListJobs(Call("wrong").get(), {}, &jobs);
  server_->coordinator().Tick();
  ASSERT_FALSE(server_->metrics_address().empty());
  std::string page = HttpGet(server_->metrics_address(), "/metrics");
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"OK\",method=\"SubmitJob\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"UNAUTHENTICATED\",method=\"ListJobs\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_jobs{state=\"pending\"} 1"));
  EXPECT_THAT(page, HasSubstr("# HELP herd_coordinator_workers_alive "));
}

// The callback methods pass the same edge as every other: who calls,
// counting by code, the status on the wire.
TEST_F(ServiceWithMetricsTest, WaitingMethodsAreAuthenticatedCountedAndMapErrorsAsEveryOther) {
  v1::JoinGenerationRequest join;
  join.set_job_id("no-such-job");
  join.set_worker_id("w1");
  join.set_wait_ms(60000);
  v1::JoinGenerationResponse joined;
  EXPECT_EQ(cluster_->JoinGeneration(Call("wrong").get(), join, &joined).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status unknown = cluster_->JoinGeneration(Call().get(), join, &joined);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(unknown.error_message(), "job no-such-job not found");

  v1::KvGetRequest get;
  get.set_job_id("no-such-job");
  get.set_generation(1);
  get.set_key("k");
  get.set_wait_ms(60000);
  v1::KvGetResponse got;
  EXPECT_EQ(cluster_->KvGet(Call("").get(), get, &got).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status missing = cluster_->KvGet(Call().get(), get, &got);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.error_message(), "job no-such-job not found");

  v1::WatchJobRequest watch;
  watch.set_id("no-such-job");
  auto watch_context = Call("wrong");
  v1::WatchJobEvent event;
  auto refused_watch = jobs_->WatchJob(watch_context.get(), watch);
  EXPECT_FALSE(refused_watch->Read(&event));
  EXPECT_EQ(refused_watch->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto unknown_watch_context = Call();
  auto unknown_watch = jobs_->WatchJob(unknown_watch_context.get(), watch);
  EXPECT_FALSE(unknown_watch->Read(&event));
  grpc::Status no_job = unknown_watch->Finish();
  EXPECT_EQ(no_job.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(no_job.error_message(), "job no-such-job not found");

  v1::WatchLogRequestsRequest listen;
  listen.set_worker_id("w1");
  auto listen_context = Call("");
  v1::LogRequest ask;
  auto refused_listen = cluster_->WatchLogRequests(listen_context.get(), listen);
  EXPECT_FALSE(refused_listen->Read(&ask));
  EXPECT_EQ(refused_listen->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

  v1::GetJobLogsRequest read;
  read.set_job_id("no-such-job");
  read.set_follow(true);
  v1::LogChunk chunk;
  auto refused_read_context = Call("wrong");
  auto refused_read = jobs_->GetJobLogs(refused_read_context.get(), read);
  EXPECT_FALSE(refused_read->Read(&chunk));
  EXPECT_EQ(refused_read->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto unknown_read_context = Call();
  auto unknown_read = jobs_->GetJobLogs(unknown_read_context.get(), read);
  EXPECT_FALSE(unknown_read->Read(&chunk));
  grpc::Status no_log = unknown_read->Finish();
  EXPECT_EQ(no_log.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(no_log.error_message(), "job no-such-job not found");
  read.set_tail_lines(-1);
  auto bad_read_context = Call();
  auto bad_read = jobs_->GetJobLogs(bad_read_context.get(), read);
  EXPECT_FALSE(bad_read->Read(&chunk));
  grpc::Status bad_tail = bad_read->Finish();
  EXPECT_EQ(bad_tail.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_tail.error_message(), "tail_lines: -1 is negative");

  std::string page = HttpGet(server_->metrics_address(), "/metrics");
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"UNAUTHENTICATED\",method=\"WatchJob\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"UNAUTHENTICATED\",method=\"GetJobLogs\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"NOT_FOUND\",method=\"GetJobLogs\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"INVALID_ARGUMENT\",method=\"GetJobLogs\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"NOT_FOUND\",method=\"WatchJob\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"UNAUTHENTICATED\",method=\"WatchLogRequests\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"UNAUTHENTICATED\",method=\"JoinGeneration\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"NOT_FOUND\",method=\"JoinGeneration\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"UNAUTHENTICATED\",method=\"KvGet\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_rpcs_total{code=\"NOT_FOUND\",method=\"KvGet\"} 1"));
  EXPECT_THAT(page, HasSubstr("herd_coordinator_audit_events_total{code=\"UNAUTHENTICATED\",event=\"unauthenticated\""));
}

// A waiting join or KvGet whose caller goes is taken off its board.
TEST_F(ServiceTest, AWaitWhoseCallerGoesStopsWaiting) {
  Register("w1", "10.0.0.1");
  Register("w2", "10.0.0.2");
  const std::string job_id = Submit(Spec(2));
  server_->coordinator().Tick();  // generation 1 forms

  // w1 waits for a generation after 1, and for a key nobody sets.
  PendingCall<v1::JoinGenerationRequest, v1::JoinGenerationResponse> join;
  join.request.set_job_id(job_id);
  join.request.set_worker_id("w1");
  join.request.set_after_generation(1);
  join.request.set_wait_ms(60000);
  PendingCall<v1::KvGetRequest, v1::KvGetResponse> get;
  get.request.set_job_id(job_id);
  get.request.set_generation(1);
  get.request.set_key("never");
  get.request.set_wait_ms(60000);
  absl::Notification join_answered, get_answered;
  cluster_->async()->JoinGeneration(join.context.get(), &join.request, &join.response, [&](grpc::Status status) {
    join.status = std::move(status);
    join_answered.Notify();
  });
  cluster_->async()->KvGet(get.context.get(), &get.request, &get.response, [&](grpc::Status status) {
    get.status = std::move(status);
    get_answered.Notify();
  });
  ASSERT_TRUE(server_->coordinator().AwaitWaitingJoins(1, absl::Seconds(10)));
  ASSERT_TRUE(server_->coordinator().AwaitWaitingKvGets(1, absl::Seconds(10)));

  join.context->TryCancel();
  get.context->TryCancel();
  ASSERT_TRUE(join_answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(get_answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(join.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(get.status.error_code(), grpc::StatusCode::CANCELLED);
  // The server heard it too: nothing waits for 60 s.
  EXPECT_TRUE(server_->coordinator().AwaitWaitingJoins(0, absl::Seconds(10)));
  EXPECT_TRUE(server_->coordinator().AwaitWaitingKvGets(0, absl::Seconds(10)));
}

// A server with few threads for synchronous calls, as --max-rpc-threads
// sets.
class ServiceWithFewThreadsTest : public ServiceTest {
 protected:
  int MaxRpcThreads() const override { return 8; }
};

TEST_F(ServiceWithFewThreadsTest, RanksWaitingForTheirGenerationOrAKeyHoldNoThreadSoOtherCallsAreAnswered) {
  // Far more ranks wait than the server has threads for.
  constexpr int kRanks = 200;
  for (int i = 0; i < kRanks; ++i) Register(absl::StrCat("w", i), absl::StrCat("10.0.", i / 200, ".", i % 200));
  const std::string job_id = Submit(Spec(kRanks));  // PENDING until the next Tick
  // Heartbeats and a user's call still find a thread, at once.
  auto other_calls_are_answered = [&](v1::JobState state) {
    for (int i = 0; i < 20; ++i) {
      v1::HeartbeatRequest request;
      request.set_worker_id(absl::StrCat("w", i));
      v1::HeartbeatResponse response;
      grpc::Status status =
          cluster_->Heartbeat(NewCallContext(kToken, std::chrono::seconds(2)).get(), request, &response);
      ASSERT_TRUE(status.ok()) << "heartbeat " << i << ": " << status.error_message();
    }
    v1::GetJobRequest get_job;
    get_job.set_id(job_id);
    v1::GetJobResponse job;
    grpc::Status got = jobs_->GetJob(NewCallContext(kToken, std::chrono::seconds(2)).get(), get_job, &job);
    ASSERT_TRUE(got.ok()) << got.error_message();
    EXPECT_EQ(job.job().state(), state);
  };

  std::vector<PendingCall<v1::JoinGenerationRequest, v1::JoinGenerationResponse>> joins(kRanks);
  std::vector<PendingCall<v1::KvGetRequest, v1::KvGetResponse>> gets(kRanks);
  Answered answered([&] {
    for (auto& call : joins) call.context->TryCancel();
    for (auto& call : gets) call.context->TryCancel();
  });
  for (int i = 0; i < kRanks; ++i) {
    auto& join = joins[i];
    join.request.set_job_id(job_id);
    join.request.set_worker_id(absl::StrCat("w", i));
    join.request.set_wait_ms(60000);
    cluster_->async()->JoinGeneration(join.context.get(), &join.request, &join.response,
                                      answered.Callback(&join.status));
  }
  EXPECT_TRUE(server_->coordinator().AwaitWaitingJoins(kRanks, absl::Seconds(20)));
  other_calls_are_answered(v1::PENDING);
  EXPECT_EQ(answered.Count(), 0);

  // The job forms: every rank is answered, each with its own rank.
  server_->coordinator().Tick();
  ASSERT_TRUE(answered.AtLeast(kRanks)) << answered.Count() << " of " << kRanks << " ranks answered";
  std::set<int64_t> ranks;
  for (const auto& join : joins) {
    ASSERT_TRUE(join.status.ok()) << join.request.worker_id() << ": " << join.status.error_message();
    EXPECT_EQ(join.response.generation(), 1);
    EXPECT_EQ(join.response.world_size(), kRanks);
    ranks.insert(join.response.rank());
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(kRanks));
  EXPECT_EQ(*ranks.begin(), 0);
  EXPECT_EQ(*ranks.rbegin(), kRanks - 1);

  // The ranks wait for rank 0's key: no thread either.
  for (auto& get : gets) {
    get.request.set_job_id(job_id);
    get.request.set_generation(1);
    get.request.set_key(joins[0].response.kv_prefix() + "nccl_id");
    get.request.set_wait_ms(60000);
    cluster_->async()->KvGet(get.context.get(), &get.request, &get.response, answered.Callback(&get.status));
  }
  EXPECT_TRUE(server_->coordinator().AwaitWaitingKvGets(kRanks, absl::Seconds(20)));
  other_calls_are_answered(v1::RUNNING);
  EXPECT_EQ(answered.Count(), kRanks);

  v1::KvSetRequest set;
  set.set_job_id(job_id);
  set.set_generation(1);
  set.set_key(gets[0].request.key());
  set.set_value("unique id");
  v1::KvSetResponse set_response;
  ASSERT_TRUE(cluster_->KvSet(Call().get(), set, &set_response).ok());
  ASSERT_TRUE(answered.AtLeast(2 * kRanks)) << answered.Count() - kRanks << " of " << kRanks << " gets answered";
  for (const auto& get : gets) {
    ASSERT_TRUE(get.status.ok()) << get.status.error_message();
    EXPECT_EQ(get.response.value(), "unique id");
  }
}

// A daemon's log request stream (worker/daemon/log_uplink.cc opens one per
// daemon and keeps it open), or a person's WatchJob, read by the test.
template <typename Event>
struct OpenStream {
  std::unique_ptr<grpc::ClientContext> context = NewCallContext(kToken, std::chrono::seconds(60));
  std::unique_ptr<grpc::ClientReader<Event>> reader;
};

OpenStream<v1::LogRequest> WatchLogRequests(v1::ClusterService::Stub& cluster, const std::string& worker_id) {
  OpenStream<v1::LogRequest> stream;
  v1::WatchLogRequestsRequest request;
  request.set_worker_id(worker_id);
  stream.reader = cluster.WatchLogRequests(stream.context.get(), request);
  return stream;
}

// Follows rank 0's log of `job_id`, as `herd logs -f --tail N` does.
OpenStream<v1::LogChunk> FollowLog(v1::JobService::Stub& jobs, const std::string& job_id, int64_t tail_lines = 0) {
  OpenStream<v1::LogChunk> stream;
  v1::GetJobLogsRequest read;
  read.set_job_id(job_id);
  read.set_rank(0);
  read.set_follow(true);
  read.set_tail_lines(tail_lines);
  stream.reader = jobs.GetJobLogs(stream.context.get(), read);
  return stream;
}

// The daemon hangs up its request stream.
void HangUp(OpenStream<v1::LogRequest>& daemon) {
  daemon.context->TryCancel();
  for (v1::LogRequest more; daemon.reader->Read(&more);) {
  }
  daemon.reader->Finish();
}

// Reads rank 0's log of `job_id` through the coordinator while the test
// plays the daemon of `worker_id` on `daemon`: the reader's request must
// arrive there; the test uploads `text`, which the reader must get.
void ReadALogThrough(v1::JobService::Stub& jobs, v1::ClusterService::Stub& cluster,
                     OpenStream<v1::LogRequest>& daemon, const std::string& job_id, const std::string& worker_id,
                     const std::string& text) {
  auto read_context = NewCallContext(kToken, std::chrono::seconds(30));
  v1::GetJobLogsRequest read;
  read.set_job_id(job_id);
  read.set_rank(0);
  auto log = jobs.GetJobLogs(read_context.get(), read);
  v1::LogRequest ask;
  ASSERT_TRUE(daemon.reader->Read(&ask)) << "no log request reached " << worker_id << "'s stream";
  EXPECT_EQ(ask.job_id(), job_id);
  auto upload_context = NewCallContext(kToken, std::chrono::seconds(30));
  v1::UploadLogResponse uploaded;
  auto upload = cluster.UploadLog(upload_context.get(), &uploaded);
  v1::UploadLogRequest chunk;
  chunk.set_session(ask.session());
  chunk.set_worker_id(worker_id);
  chunk.set_data(text);
  ASSERT_TRUE(upload->Write(chunk));
  ASSERT_TRUE(upload->WritesDone());
  grpc::Status upload_status = upload->Finish();
  ASSERT_TRUE(upload_status.ok()) << upload_status.error_message();
  std::string got;
  for (v1::LogChunk piece; log->Read(&piece);) got += piece.data();
  grpc::Status read_status = log->Finish();
  ASSERT_TRUE(read_status.ok()) << read_status.error_message();
  EXPECT_EQ(got, text);
}

TEST_F(ServiceWithFewThreadsTest, OpenLogRequestStreamsAndJobWatchersHoldNoThreadSoOtherCallsAreAnswered) {
  // Every daemon keeps a log request stream open: far more than the server
  // has threads.
  constexpr int kDaemons = 200;
  constexpr int kWatchers = 20;
  for (int i = 0; i < kDaemons; ++i) Register(absl::StrCat("w", i), absl::StrCat("10.0.", i / 200, ".", i % 200));
  const std::string job_id = Submit(Spec(1));
  server_->coordinator().Tick();
  v1::GetJobRequest get_job;
  get_job.set_id(job_id);
  v1::GetJobResponse job;
  ASSERT_TRUE(jobs_->GetJob(Call().get(), get_job, &job).ok());
  ASSERT_EQ(job.job().state(), v1::RUNNING);
  const std::string member = job.job().workers(0);

  std::vector<OpenStream<v1::LogRequest>> daemons;
  std::map<std::string, size_t> daemon_of;
  for (int i = 0; i < kDaemons; ++i) {
    daemon_of[absl::StrCat("w", i)] = daemons.size();
    daemons.push_back(WatchLogRequests(*cluster_, absl::StrCat("w", i)));
  }
  ASSERT_TRUE(server_->log_relay().AwaitListeners(kDaemons, absl::Seconds(20)))
      << "not every daemon's stream was taken";
  v1::WatchJobRequest watch;
  watch.set_id(job_id);
  std::vector<OpenStream<v1::WatchJobEvent>> watchers(kWatchers);
  for (auto& watcher : watchers) {
    watcher.reader = jobs_->WatchJob(watcher.context.get(), watch);
    v1::WatchJobEvent now;
    ASSERT_TRUE(watcher.reader->Read(&now)) << watcher.reader->Finish().error_message();
    EXPECT_EQ(now.job().state(), v1::RUNNING);
  }
  ASSERT_TRUE(server_->coordinator().AwaitJobWatchers(kWatchers, absl::Seconds(20)));

  // Heartbeats, a user's call and a rank's join are answered at once.
  for (int i = 0; i < 20; ++i) {
    v1::HeartbeatRequest request;
    request.set_worker_id(absl::StrCat("w", i));
    v1::HeartbeatResponse response;
    grpc::Status status = cluster_->Heartbeat(NewCallContext(kToken, std::chrono::seconds(2)).get(), request, &response);
    ASSERT_TRUE(status.ok()) << "heartbeat " << i << ": " << status.error_message();
  }
  grpc::Status got = jobs_->GetJob(NewCallContext(kToken, std::chrono::seconds(2)).get(), get_job, &job);
  ASSERT_TRUE(got.ok()) << got.error_message();
  v1::JoinGenerationResponse joined = Join(job_id, member);
  EXPECT_EQ(joined.generation(), 1);
  EXPECT_EQ(joined.rank(), 0);

  // A reader's request reaches the member's open stream, and a change of
  // the job reaches every watcher.
  ReadALogThrough(*jobs_, *cluster_, daemons[daemon_of[member]], job_id, member, "step 1\n");
  v1::ReportProgressRequest progress;
  progress.set_job_id(job_id);
  progress.set_generation(1);
  progress.set_rank(0);
  progress.set_step(7);
  progress.set_loss(1.5);
  v1::ReportProgressResponse progressed;
  ASSERT_TRUE(cluster_->ReportProgress(Call().get(), progress, &progressed).ok());
  for (auto& watcher : watchers) {
    v1::WatchJobEvent change;
    ASSERT_TRUE(watcher.reader->Read(&change));
    EXPECT_EQ(change.job().step(), 7);
  }

  // The member's daemon reopens its stream: the new one takes over, the old
  // one ends OK, and requests go to the new one.
  OpenStream<v1::LogRequest> reopened = WatchLogRequests(*cluster_, member);
  OpenStream<v1::LogRequest>& replaced = daemons[daemon_of[member]];
  v1::LogRequest none;
  EXPECT_FALSE(replaced.reader->Read(&none));
  grpc::Status ended = replaced.reader->Finish();
  EXPECT_TRUE(ended.ok()) << ended.error_message();
  EXPECT_TRUE(server_->log_relay().AwaitListeners(kDaemons, absl::Seconds(20)));
  ReadALogThrough(*jobs_, *cluster_, reopened, job_id, member, "step 8\n");

  // Streams whose callers go are freed.
  for (auto& watcher : watchers) watcher.context->TryCancel();
  for (auto& watcher : watchers) {
    v1::WatchJobEvent more;
    while (watcher.reader->Read(&more)) {
    }
    EXPECT_EQ(watcher.reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(server_->coordinator().AwaitJobWatchers(0, absl::Seconds(20)));
  daemons[daemon_of[member]] = std::move(reopened);
  for (auto& daemon : daemons) daemon.context->TryCancel();
  for (auto& daemon : daemons) {
    v1::LogRequest more;
    while (daemon.reader->Read(&more)) {
    }
    daemon.reader->Finish();
  }
  EXPECT_TRUE(server_->log_relay().AwaitListeners(0, absl::Seconds(20)));
}

// Uploads `text` as one message of `upload`, the daemon's side of a session.
void UploadLine(grpc::ClientWriter<v1::UploadLogRequest>& upload, const std::string& session,
                const std::string& worker_id, const std::string& text) {
  v1::UploadLogRequest chunk;
  chunk.set_session(session);
  chunk.set_worker_id(worker_id);
  chunk.set_data(text);
  ASSERT_TRUE(upload.Write(chunk));
}

// People following a log (`herd logs -f`) hold no thread, nor do their
// daemons' uploads waiting for the trainer's next lines: more followers than
// the server has threads, first with no daemon answering, then each with its
// upload open, leave every other call answered, and every follower gets its
// lines as they come, the first naming the worker.
TEST_F(ServiceWithFewThreadsTest, FollowedLogsWithTheirUploadsOpenHoldNoThreadSoOtherCallsAreAnsweredAndLinesArrive) {
  constexpr int kFollowers = 24;  // three times the threads
  Register("w1", "10.0.0.1");
  const std::string job_id = Submit(Spec(1));
  server_->coordinator().Tick();
  v1::GetJobRequest get_job;
  get_job.set_id(job_id);
  v1::GetJobResponse job;
  ASSERT_TRUE(jobs_->GetJob(Call().get(), get_job, &job).ok());
  ASSERT_EQ(job.job().state(), v1::RUNNING);
  const std::string member = job.job().workers(0);
  OpenStream<v1::LogRequest> daemon = WatchLogRequests(*cluster_, member);
  ASSERT_TRUE(server_->log_relay().AwaitListeners(1, absl::Seconds(20)));

  // Each follower asks for a different tail, which tells the requests apart.
  std::vector<OpenStream<v1::LogChunk>> followers(kFollowers);
  for (int i = 0; i < kFollowers; ++i) followers[i] = FollowLog(*jobs_, job_id, i);
  std::vector<std::string> session_of(kFollowers);
  for (int i = 0; i < kFollowers; ++i) {
    v1::LogRequest ask;
    ASSERT_TRUE(daemon.reader->Read(&ask)) << "request " << i << " did not reach the daemon";
    EXPECT_EQ(ask.job_id(), job_id);
    EXPECT_TRUE(ask.follow());
    ASSERT_GE(ask.tail_lines(), 0);
    ASSERT_LT(ask.tail_lines(), kFollowers);
    session_of[ask.tail_lines()] = ask.session();
  }
  ASSERT_TRUE(server_->log_relay().AwaitSessions(kFollowers, absl::Seconds(20)))
      << "not every follower's call was taken";

  auto other_calls_are_answered = [&] {
    for (int i = 0; i < 20; ++i) {
      v1::HeartbeatRequest request;
      request.set_worker_id("w1");
      v1::HeartbeatResponse response;
      grpc::Status status =
          cluster_->Heartbeat(NewCallContext(kToken, std::chrono::seconds(2)).get(), request, &response);
      ASSERT_TRUE(status.ok()) << "heartbeat " << i << ": " << status.error_message();
    }
    grpc::Status got = jobs_->GetJob(NewCallContext(kToken, std::chrono::seconds(2)).get(), get_job, &job);
    ASSERT_TRUE(got.ok()) << got.error_message();
    EXPECT_EQ(job.job().state(), v1::RUNNING);
  };
  // Nobody has answered the followers yet.
  ASSERT_NO_FATAL_FAILURE(other_calls_are_answered());

  // The daemon answers every follower with its first line and keeps the
  // upload open; each follower gets its line, so each upload is attached.
  struct Upload {
    std::unique_ptr<grpc::ClientContext> context = NewCallContext(kToken, std::chrono::seconds(60));
    v1::UploadLogResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::UploadLogRequest>> writer;
  };
  std::vector<Upload> uploads(kFollowers);
  for (int i = 0; i < kFollowers; ++i) {
    uploads[i].writer = cluster_->UploadLog(uploads[i].context.get(), &uploads[i].response);
    ASSERT_NO_FATAL_FAILURE(
        UploadLine(*uploads[i].writer, session_of[i], member, absl::StrCat("follower ", i, " step 1\n")));
  }
  ASSERT_NO_FATAL_FAILURE(other_calls_are_answered());
  auto each_follower_gets = [&](const std::string& step) {
    for (int i = 0; i < kFollowers; ++i) {
      v1::LogChunk chunk;
      ASSERT_TRUE(followers[i].reader->Read(&chunk))
          << "follower " << i << ": " << followers[i].reader->Finish().error_message();
      EXPECT_EQ(chunk.data(), absl::StrCat("follower ", i, " ", step, "\n"));
      EXPECT_EQ(chunk.worker_id(), step == "step 1" ? member : "") << "follower " << i;
    }
  };
  ASSERT_NO_FATAL_FAILURE(each_follower_gets("step 1"));

  // Every upload waits for the trainer's next lines: heartbeats and a
  // user's call are answered at once.
  ASSERT_NO_FATAL_FAILURE(other_calls_are_answered());

  // The trainer writes more: every follower gets it.
  for (int i = 0; i < kFollowers; ++i) {
    ASSERT_NO_FATAL_FAILURE(
        UploadLine(*uploads[i].writer, session_of[i], member, absl::StrCat("follower ", i, " step 2\n")));
  }
  ASSERT_NO_FATAL_FAILURE(each_follower_gets("step 2"));
  ASSERT_NO_FATAL_FAILURE(other_calls_are_answered());

  // The trainer exits: each upload ends OK, and so does each follow.
  for (int i = 0; i < kFollowers; ++i) {
    ASSERT_TRUE(uploads[i].writer->WritesDone());
    grpc::Status uploaded = uploads[i].writer->Finish();
    EXPECT_TRUE(uploaded.ok()) << "upload " << i << ": " << uploaded.error_message();
  }
  for (int i = 0; i < kFollowers; ++i) {
    v1::LogChunk chunk;
    EXPECT_FALSE(followers[i].reader->Read(&chunk));
    grpc::Status followed = followers[i].reader->Finish();
    EXPECT_TRUE(followed.ok()) << "follower " << i << ": " << followed.error_message();
  }
  EXPECT_TRUE(server_->log_relay().AwaitSessions(0, absl::Seconds(20)));
  HangUp(daemon);
}

// A follower who leaves ends the daemon's upload at once, though the daemon
// sends nothing more: it stops uploading a log nobody reads.
TEST_F(ServiceTest, AFollowerWhoLeavesEndsTheUploadOfItsLog) {
  Register("w1", "10.0.0.1");
  const std::string job_id = Submit(Spec(1));
  server_->coordinator().Tick();
  OpenStream<v1::LogRequest> daemon = WatchLogRequests(*cluster_, "w1");
  ASSERT_TRUE(server_->log_relay().AwaitListeners(1, absl::Seconds(20)));
  OpenStream<v1::LogChunk> follower = FollowLog(*jobs_, job_id);
  v1::LogRequest ask;
  ASSERT_TRUE(daemon.reader->Read(&ask));
  auto upload_context = NewCallContext(kToken, std::chrono::seconds(60));
  v1::UploadLogResponse uploaded;
  auto upload = cluster_->UploadLog(upload_context.get(), &uploaded);
  UploadLine(*upload, ask.session(), "w1", "step 1\n");
  v1::LogChunk chunk;
  ASSERT_TRUE(follower.reader->Read(&chunk)) << follower.reader->Finish().error_message();
  EXPECT_EQ(chunk.data(), "step 1\n");

  follower.context->TryCancel();
  while (follower.reader->Read(&chunk)) {
  }
  EXPECT_EQ(follower.reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  grpc::Status upload_end = upload->Finish();
  EXPECT_EQ(upload_end.error_code(), grpc::StatusCode::CANCELLED) << upload_end.error_message();
  EXPECT_EQ(upload_end.error_message(), "the log reader went away");
  EXPECT_TRUE(server_->log_relay().AwaitSessions(0, absl::Seconds(20)));
  HangUp(daemon);
}

// A log several times the relay's buffer reaches its reader whole and in
// order while the upload waits for room: the reader takes one chunk at a
// time, each once the last is written.
TEST_F(ServiceTest, ALogLargerThanTheRelayBufferArrivesWholeAndInOrder) {
  constexpr int kChunks = 1000;
  constexpr size_t kChunkBytes = 4096;  // 4 MiB in all; the buffer holds 1
  Register("w1", "10.0.0.1");
  const std::string job_id = Submit(Spec(1));
  server_->coordinator().Tick();
  OpenStream<v1::LogRequest> daemon = WatchLogRequests(*cluster_, "w1");
  ASSERT_TRUE(server_->log_relay().AwaitListeners(1, absl::Seconds(20)));
  OpenStream<v1::LogChunk> reader = FollowLog(*jobs_, job_id);
  v1::LogRequest ask;
  ASSERT_TRUE(daemon.reader->Read(&ask));

  grpc::Status upload_status;
  std::thread uploader([&] {
    auto upload_context = NewCallContext(kToken, std::chrono::seconds(60));
    v1::UploadLogResponse uploaded;
    auto upload = cluster_->UploadLog(upload_context.get(), &uploaded);
    for (int i = 0; i < kChunks; ++i) {
      UploadLine(*upload, ask.session(), "w1", std::string(kChunkBytes, static_cast<char>('a' + i % 26)));
    }
    upload->WritesDone();
    upload_status = upload->Finish();
  });
  std::string got;
  int chunks = 0;
  for (v1::LogChunk chunk; reader.reader->Read(&chunk); ++chunks) {
    EXPECT_EQ(chunk.worker_id(), chunks == 0 ? "w1" : "") << "chunk " << chunks;
    got += chunk.data();
  }
  grpc::Status read_status = reader.reader->Finish();
  uploader.join();
  ASSERT_TRUE(upload_status.ok()) << upload_status.error_message();
  ASSERT_TRUE(read_status.ok()) << read_status.error_message();
  ASSERT_EQ(got.size(), kChunks * kChunkBytes);
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_EQ(got.substr(i * kChunkBytes, kChunkBytes), std::string(kChunkBytes, static_cast<char>('a' + i % 26)))
        << "chunk " << i << " out of order";
  }
  EXPECT_TRUE(server_->log_relay().AwaitSessions(0, absl::Seconds(20)));
  HangUp(daemon);
}

// A followed log ends at once when the coordinator stops, with the status a
// client retries on, and the daemon's upload of it, waiting for the
// trainer's next lines, ends at once with that status too.
TEST_F(ServiceTest, ShutdownEndsAFollowedLogWithUnavailableAndStopsItsUpload) {
  Register("w1", "10.0.0.1");
  const std::string job_id = Submit(Spec(1));
  server_->coordinator().Tick();
  OpenStream<v1::LogRequest> daemon = WatchLogRequests(*cluster_, "w1");
  ASSERT_TRUE(server_->log_relay().AwaitListeners(1, absl::Seconds(20)));
  OpenStream<v1::LogChunk> follower = FollowLog(*jobs_, job_id);
  v1::LogRequest ask;
  ASSERT_TRUE(daemon.reader->Read(&ask));
  auto upload_context = NewCallContext(kToken, std::chrono::seconds(60));
  v1::UploadLogResponse uploaded;
  auto upload = cluster_->UploadLog(upload_context.get(), &uploaded);
  UploadLine(*upload, ask.session(), "w1", "step 1\n");
  v1::LogChunk chunk;
  ASSERT_TRUE(follower.reader->Read(&chunk)) << follower.reader->Finish().error_message();
  EXPECT_EQ(chunk.data(), "step 1\n");

  // The upload holds no thread, so gRPC's own shutdown need not wait for it
  // (nor cancel it after its grace).
  server_->Shutdown();
  EXPECT_FALSE(follower.reader->Read(&chunk));
  grpc::Status follow_end = follower.reader->Finish();
  EXPECT_EQ(follow_end.error_code(), grpc::StatusCode::UNAVAILABLE) << follow_end.error_message();
  EXPECT_EQ(follow_end.error_message(), "coordinator is shutting down");
  // The daemon, which sent nothing more, learns it from the upload's end.
  grpc::Status upload_end = upload->Finish();
  EXPECT_EQ(upload_end.error_code(), grpc::StatusCode::UNAVAILABLE) << upload_end.error_message();
  EXPECT_EQ(upload_end.error_message(), "coordinator is shutting down");
  for (v1::LogRequest more; daemon.reader->Read(&more);) {
  }
  EXPECT_EQ(daemon.reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Stopping ends the streams that only wait (no 5 s grace for gRPC to cancel
// them), each with the status a client retries on.
TEST_F(ServiceTest, ShutdownEndsOpenStreamsAtOnceWithUnavailable) {
  Register("w1", "10.0.0.1");
  const std::string job_id = Submit(Spec(1));
  OpenStream<v1::LogRequest> daemon = WatchLogRequests(*cluster_, "w1");
  ASSERT_TRUE(server_->log_relay().AwaitListeners(1, absl::Seconds(20)));
  OpenStream<v1::WatchJobEvent> watcher;
  v1::WatchJobRequest watch;
  watch.set_id(job_id);
  watcher.reader = jobs_->WatchJob(watcher.context.get(), watch);
  v1::WatchJobEvent event;
  ASSERT_TRUE(watcher.reader->Read(&event));

  server_->Shutdown();
  v1::LogRequest ask;
  EXPECT_FALSE(daemon.reader->Read(&ask));
  grpc::Status daemon_end = daemon.reader->Finish();
  EXPECT_EQ(daemon_end.error_code(), grpc::StatusCode::UNAVAILABLE) << daemon_end.error_message();
  EXPECT_EQ(daemon_end.error_message(), "coordinator is shutting down");
  EXPECT_FALSE(watcher.reader->Read(&event));
  grpc::Status watch_end = watcher.reader->Finish();
  EXPECT_EQ(watch_end.error_code(), grpc::StatusCode::UNAVAILABLE) << watch_end.error_message();
  EXPECT_EQ(watch_end.error_message(), "coordinator is shutting down");
}

// herd_coordinator_open_streams on the /metrics page, kind -> value.
std::map<std::string, std::string> OpenStreamsGauge(const std::string& metrics_address) {
  const std::string prefix = "herd_coordinator_open_streams{kind=\"";
  std::map<std::string, std::string> gauge;
  std::istringstream page(HttpGet(metrics_address, "/metrics"));
  for (std::string line; std::getline(page, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t end = line.find("\"} ", prefix.size());
    if (end == std::string::npos) continue;
    gauge[line.substr(prefix.size(), end - prefix.size())] = line.substr(end + 3);
  }
  return gauge;
}

// Each stream the coordinator holds counts by kind while it is open, and
// no longer once it closed, however it closed.
TEST_F(ServiceWithMetricsTest, OpenStreamsAreGaugedByKindUntilTheyClose) {
  using Gauge = std::map<std::string, std::string>;
  Register("w1", "10.0.0.1");
  const std::string job_id = Submit(Spec(1));
  server_->coordinator().Tick();
  ASSERT_EQ(Join(job_id, "w1").generation(), 1);
  v1::CommitCheckpointRequest record;
  record.set_job_id(job_id);
  record.set_generation(1);
  record.set_step(10);
  record.set_path(job_id + "/step-10");
  record.set_size_bytes(100);
  record.set_sha256("feed");
  v1::CommitCheckpointResponse recorded;
  grpc::Status committed = cluster_->CommitCheckpoint(Call().get(), record, &recorded);
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  const Gauge none = {{"job_logs", "0"}, {"job_watch", "0"}, {"log_requests", "0"}, {"log_upload", "0"},
                      {"model_fetch", "0"}};
  EXPECT_EQ(OpenStreamsGauge(server_->metrics_address()), none);

  // w1's daemon listens for requests, a person watches the job.
  OpenStream<v1::LogRequest> daemon = WatchLogRequests(*cluster_, "w1");
  ASSERT_TRUE(server_->log_relay().AwaitListeners(1, absl::Seconds(20)));
  OpenStream<v1::WatchJobEvent> watcher;
  v1::WatchJobRequest watch;
  watch.set_id(job_id);
  watcher.reader = jobs_->WatchJob(watcher.context.get(), watch);
  v1::WatchJobEvent event;
  ASSERT_TRUE(watcher.reader->Read(&event));
  ASSERT_TRUE(server_->coordinator().AwaitJobWatchers(1, absl::Seconds(20)));
  // A reader follows rank 0's log, which the daemon uploads; someone fetches
  // a file of the checkpoint.
  auto log_context = Call();
  v1::GetJobLogsRequest read;
  read.set_job_id(job_id);
  read.set_rank(0);
  auto log = jobs_->GetJobLogs(log_context.get(), read);
  v1::LogRequest log_ask;
  ASSERT_TRUE(daemon.reader->Read(&log_ask));
  auto upload_context = Call();
  v1::UploadLogResponse uploaded;
  auto upload = cluster_->UploadLog(upload_context.get(), &uploaded);
  v1::UploadLogRequest chunk;
  chunk.set_session(log_ask.session());
  chunk.set_worker_id("w1");
  chunk.set_data("step 1\n");
  ASSERT_TRUE(upload->Write(chunk));
  v1::LogChunk piece;
  ASSERT_TRUE(log->Read(&piece));  // the upload is being relayed
  auto fetch_context = Call();
  v1::FetchModelFileRequest fetch;
  fetch.set_job_id(job_id);
  fetch.set_checkpoint_step(10);
  fetch.set_file("model.pt");
  auto file = jobs_->FetchModelFile(fetch_context.get(), fetch);
  v1::LogRequest fetch_ask;
  ASSERT_TRUE(daemon.reader->Read(&fetch_ask));
  EXPECT_EQ(OpenStreamsGauge(server_->metrics_address()),
            (Gauge{{"job_logs", "1"}, {"job_watch", "1"}, {"log_requests", "1"}, {"log_upload", "1"},
                   {"model_fetch", "1"}}));

  // The log and the upload end OK, the fetch finds no file, the watcher and
  // the daemon go.
  ASSERT_TRUE(upload->WritesDone());
  grpc::Status upload_end = upload->Finish();
  EXPECT_TRUE(upload_end.ok()) << upload_end.error_message();
  while (log->Read(&piece)) {
  }
  grpc::Status log_end = log->Finish();
  EXPECT_TRUE(log_end.ok()) << log_end.error_message();
  v1::UploadLogRequest missing;
  missing.set_session(fetch_ask.session());
  missing.set_worker_id("w1");
  missing.set_error("no model.pt in " + job_id + "/step-10");
  auto refusal_context = Call();
  auto refusal = cluster_->UploadLog(refusal_context.get(), &uploaded);
  ASSERT_TRUE(refusal->Write(missing));
  ASSERT_TRUE(refusal->WritesDone());
  EXPECT_TRUE(refusal->Finish().ok());
  v1::FileChunk file_chunk;
  EXPECT_FALSE(file->Read(&file_chunk));
  EXPECT_EQ(file->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  watcher.context->TryCancel();
  while (watcher.reader->Read(&event)) {
  }
  EXPECT_EQ(watcher.reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  HangUp(daemon);
  ASSERT_TRUE(server_->coordinator().AwaitJobWatchers(0, absl::Seconds(20)));
  ASSERT_TRUE(server_->log_relay().AwaitListeners(0, absl::Seconds(20)));
  EXPECT_EQ(OpenStreamsGauge(server_->metrics_address()), none);
}

// A server with few threads whose store writes the test holds open (etcd's
// round trip, an fsync that does not return).
class ServiceWithHeldWritesTest : public ServiceWithFewThreadsTest {
 protected:
  std::function<std::unique_ptr<StateStore>(std::unique_ptr<StateStore>)> WrapStore() override {
    return [this](std::unique_ptr<StateStore> store) { return std::make_unique<GatedStore>(std::move(store), &gate_); };
  }
  void TearDown() override {
    gate_.Open();  // a failed test may have left it closed; shutdown writes
    server_.reset();
  }

  Gate gate_;
};

TEST_F(ServiceWithHeldWritesTest, WhileAWriteIsHeldRenewalsAndJoinsAreAnsweredAndStateChangesOnceItEnds) {
  // One single-worker job per member: a member's heartbeat that reports its
  // trainer's exit changes its job (a write); the last job's member joins.
  constexpr int kExiting = 64;  // far more than gRPC has callback threads
  constexpr int kIdle = 20;     // their heartbeats only renew the lease
  for (int i = 0; i <= kExiting; ++i) {
    Register(absl::StrCat("m", i), absl::StrCat("10.0.1.", i));
    Heartbeat(absl::StrCat("m", i));
  }
  v1::JobSpec spec = Spec(1);
  spec.set_max_workers(1);
  for (int i = 0; i <= kExiting; ++i) Submit(spec);
  server_->coordinator().Tick();
  v1::ListJobsResponse listed;
  ASSERT_TRUE(jobs_->ListJobs(Call().get(), {}, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), kExiting + 1);
  std::vector<std::pair<std::string, std::string>> members;  // job, its worker
  for (const v1::JobInfo& job : listed.jobs()) {
    ASSERT_EQ(job.state(), v1::RUNNING) << job.id();
    ASSERT_EQ(job.workers_size(), 1) << job.id();
    members.emplace_back(job.id(), job.workers(0));
  }
  const auto [joining_job, joining_member] = members.back();
  members.pop_back();
  for (int i = 0; i < kIdle; ++i) {
    Register(absl::StrCat("h", i), absl::StrCat("10.0.2.", i));
    Heartbeat(absl::StrCat("h", i));
  }

  gate_.Close();
  std::vector<PendingCall<v1::HeartbeatRequest, v1::HeartbeatResponse>> exits(kExiting);
  Answered answered([&] {
    for (auto& call : exits) call.context->TryCancel();
  });
  for (int i = 0; i < kExiting; ++i) {
    auto& call = exits[i];
    call.request.set_worker_id(members[i].second);
    v1::TrainerExit* exit = call.request.add_exits();
    exit->set_job_id(members[i].first);
    exit->set_generation(1);
    exit->set_exit_code(v1::TRAINER_EXIT_JOB_ERROR);
    exit->set_message("bad input");
    cluster_->async()->Heartbeat(call.context.get(), &call.request, &call.response, answered.Callback(&call.status));
  }
  ASSERT_TRUE(gate_.AwaitHeld());

  // While the write is held: lease renewals, a user's read and a member's
  // join are answered at once, however many state changes wait for it.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kIdle; ++i) {
      v1::HeartbeatRequest request;
      request.set_worker_id(absl::StrCat("h", i));
      v1::HeartbeatResponse response;
      grpc::Status status =
          cluster_->Heartbeat(NewCallContext(kToken, std::chrono::seconds(2)).get(), request, &response);
      ASSERT_TRUE(status.ok()) << "renewal of " << request.worker_id() << ": " << status.error_message();
      EXPECT_FALSE(response.reregister());
    }
  }
  v1::GetJobRequest get_job;
  get_job.set_id(joining_job);
  v1::GetJobResponse job;
  grpc::Status got = jobs_->GetJob(NewCallContext(kToken, std::chrono::seconds(2)).get(), get_job, &job);
  ASSERT_TRUE(got.ok()) << got.error_message();
  v1::JoinGenerationRequest join;
  join.set_job_id(joining_job);
  join.set_worker_id(joining_member);
  join.set_wait_ms(1000);
  v1::JoinGenerationResponse joined;
  grpc::Status join_status =
      cluster_->JoinGeneration(NewCallContext(kToken, std::chrono::seconds(2)).get(), join, &joined);
  ASSERT_TRUE(join_status.ok()) << join_status.error_message();
  EXPECT_EQ(joined.generation(), 1);
  EXPECT_EQ(answered.Count(), 0) << "a heartbeat was answered before its write was durable";

  // The write completes: every state change is answered, and took effect.
  gate_.Open();
  ASSERT_TRUE(answered.AtLeast(kExiting)) << answered.Count() << " of " << kExiting << " exits answered";
  for (int i = 0; i < kExiting; ++i) {
    ASSERT_TRUE(exits[i].status.ok()) << members[i].second << ": " << exits[i].status.error_message();
    get_job.set_id(members[i].first);
    ASSERT_TRUE(jobs_->GetJob(Call().get(), get_job, &job).ok());
    EXPECT_EQ(job.job().state(), v1::FAILED) << members[i].first;
  }
}

// What a standby names to callers: the bound address, a wildcard host
// replaced by the host's name.
TEST(AdvertisedAddress, AWildcardHostBecomesTheHostName) {
  EXPECT_EQ(AdvertisedAddress("0.0.0.0:7070", "coord-0"), "coord-0:7070");
  EXPECT_EQ(AdvertisedAddress("[::]:7070", "coord-0"), "coord-0:7070");
  EXPECT_EQ(AdvertisedAddress(":7070", "coord-0"), "coord-0:7070");
  EXPECT_EQ(AdvertisedAddress("10.0.0.5:7070", "coord-0"), "10.0.0.5:7070");
  EXPECT_EQ(AdvertisedAddress("coord-0.herd:7070", "other"), "coord-0.herd:7070");
}

}  // namespace
}  // namespace herd::coordinator
