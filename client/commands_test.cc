// The CLI end to end (flags, RPCs, output, exit codes) against a fake
// in-process JobService.
#include <grpcpp/grpcpp.h>
#include <google/protobuf/util/message_differencer.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "client/cli.h"
#include "client/commands.h"
#include "common/job_spec_yaml.h"
#include "common/sha256.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace herd::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

v1::JobInfo Job(const std::string& id, v1::JobState state, int64_t step) {
  v1::JobInfo job;
  job.set_id(id);
  job.set_name("mnist");
  job.set_state(state);
  job.set_step(step);
  job.set_total_steps(100);
  job.set_world_size(2);
  job.set_loss(1.0 / (1 + step));
  return job;
}

class FakeJobService final : public v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    submitted_.push_back(request->spec());
    auto it = context->client_metadata().find("authorization");
    last_authorization_ =
        it == context->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
    v1::JobInfo job = Job("job-new", v1::PENDING, 0);
    job.set_name(request->spec().name());
    jobs_[job.id()] = job;
    *response->mutable_job() = job;
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override {
    if (request->id() == "hangs") {
      // Never answers: the client's deadline must end the call.
      while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return grpc::Status::CANCELLED;
    }
    if (request->id() == "unstored") {
      // Reached, but its store is not: what a coordinator says with etcd down.
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "state change not persisted: etcd txn failed");
    }
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request->id());
    if (it == jobs_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->id());
    *response->mutable_job() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_) *response->add_jobs() = job;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request->id());
    if (it == jobs_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->id());
    it->second.set_state(v1::CANCELLED);
    *response->mutable_job() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status ResizeJob(grpc::ServerContext*, const v1::ResizeJobRequest* request,
                         v1::ResizeJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request->id());
    if (it == jobs_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->id());
    v1::JobSpec* spec = it->second.mutable_spec();
    if (request->min_workers() > 0) spec->set_min_workers(request->min_workers());
    if (request->max_workers() > 0) spec->set_max_workers(request->max_workers());
    *response->mutable_job() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status SetJobPriority(grpc::ServerContext*, const v1::SetJobPriorityRequest* request,
                              v1::SetJobPriorityResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request->id());
    if (it == jobs_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->id());
    it->second.mutable_spec()->set_priority(request->priority());
    *response->mutable_job() = it->second;
    return grpc::Status::OK;
  }

  // Streams the job's scripted events, then ends (as at a final state).
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::WatchJobEvent>* writer) override {
    std::vector<v1::JobInfo> events;
    {
      absl::MutexLock lock(&mu_);
      ++watch_calls_;
      events = events_[request->id()];
    }
    for (const v1::JobInfo& job : events) {
      v1::WatchJobEvent event;
      *event.mutable_job() = job;
      writer->Write(event);
      absl::MutexLock lock(&mu_);
      jobs_[job.id()] = job;
    }
    return grpc::Status::OK;
  }

  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override {
    v1::WorkerInfo* worker = response->add_workers();
    worker->set_id("w1");
    worker->set_address("10.0.0.1");
    worker->set_device_kind("cpu");
    worker->set_device_count(1);
    worker->set_state(v1::IDLE);
    absl::MutexLock lock(&mu_);
    if (busy_polls_ > 0) {
      // Still leaving job-1; each poll is a second later on the CLI's clock.
      --busy_polls_;
      worker->set_state(v1::BUSY);
      worker->set_job_id("job-1");
      if (clock_ != nullptr) clock_->Advance(1);
    }
    return grpc::Status::OK;
  }

  grpc::Status DrainWorker(grpc::ServerContext*, const v1::DrainWorkerRequest* request,
                           v1::DrainWorkerResponse* response) override {
    response->add_released_jobs("job-1");
    response->mutable_worker()->set_id(request->worker_id());
    response->mutable_worker()->set_cordoned(true);
    response->mutable_worker()->set_state(v1::BUSY);
    return grpc::Status::OK;
  }
  // The next `polls` worker lists show w1 BUSY, advancing `clock` a second each.
  void LeaveAfter(int polls, FakeClock* clock) {
    absl::MutexLock lock(&mu_);
    busy_polls_ = polls;
    clock_ = clock;
  }

  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override {
    v1::CheckpointInfo* checkpoint = response->add_checkpoints();
    checkpoint->set_id("ckpt-1");
    checkpoint->set_job_id(request->job_id());
    checkpoint->set_step(50);
    checkpoint->set_path(request->job_id() + "/step-50");
    return grpc::Status::OK;
  }

  // Sends the file set with SetModelFile in three chunks.
  grpc::Status FetchModelFile(grpc::ServerContext*, const v1::FetchModelFileRequest* request,
                              grpc::ServerWriter<v1::FileChunk>* writer) override {
    std::string bytes;
    {
      absl::MutexLock lock(&mu_);
      auto it = model_files_.find(request->file());
      if (it == model_files_.end()) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no worker holds " + request->file());
      }
      bytes = it->second;
    }
    const size_t third = bytes.size() / 3 + 1;
    for (size_t at = 0; at < bytes.size(); at += third) {
      v1::FileChunk chunk;
      chunk.set_data(bytes.substr(at, third));
      if (at == 0) chunk.set_worker_id("w1");
      writer->Write(chunk);
    }
    return grpc::Status::OK;
  }
  void SetModelFile(const std::string& name, const std::string& bytes) {
    absl::MutexLock lock(&mu_);
    model_files_[name] = bytes;
  }

  void AddJob(const v1::JobInfo& job) {
    absl::MutexLock lock(&mu_);
    jobs_[job.id()] = job;
  }
  void SetEvents(const std::string& id, std::vector<v1::JobInfo> events) {
    absl::MutexLock lock(&mu_);
    events_[id] = std::move(events);
  }
  std::vector<v1::JobSpec> submitted() {
    absl::MutexLock lock(&mu_);
    return submitted_;
  }
  std::string last_authorization() {
    absl::MutexLock lock(&mu_);
    return last_authorization_;
  }

 private:
  int busy_polls_ ABSL_GUARDED_BY(mu_) = 0;
  FakeClock* clock_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Mutex mu_;
  std::map<std::string, v1::JobInfo> jobs_;
  std::map<std::string, std::vector<v1::JobInfo>> events_;
  std::map<std::string, std::string> model_files_;
  std::vector<v1::JobSpec> submitted_;
  std::string last_authorization_;
  int watch_calls_ = 0;
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("commands_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
  }

  void TearDown() override { server_->Shutdown(); }

  // Runs `herd ARGS...` against the fake (unless ARGS name another coordinator).
  int Herd(std::vector<std::string> args) {
    args.insert(args.begin(), "herd");
    std::vector<const char*> argv;
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    out_.str("");
    err_.str("");
    CliEnvironment environment;
    environment.out = &out_;
    environment.err = &err_;
    environment.coordinator = address_;
    environment.token_file = env_token_file_;
    environment.stdout_is_tty = tty_;
    environment.clock = &clock_;
    return RunCli(static_cast<int>(argv.size()), argv.data(), environment);
  }

  std::string WriteFile(const std::string& name, const std::string& content) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << content;
    return path;
  }
  // Token files must be private to their owner.
  std::string WriteTokenFile(const std::string& name, const std::string& token) {
    std::string path = WriteFile(name, token);
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return path;
  }

  std::vector<std::string> OutLines() {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::filesystem::path dir_;
  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::string env_token_file_;
  bool tty_ = false;
  FakeClock clock_{5000};
  std::ostringstream out_, err_;
};

constexpr char kJobYaml[] = R"(name: fashion
model: mnist_cnn
dataset:
  kind: synthetic
  synthetic_samples: 1000
  synthetic_features: 784
  synthetic_classes: 10
batch_size: 32
epochs: 2
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
min_workers: 1
max_workers: 2
)";

// A succeeded job whose final model (safetensors) is `bytes`.
v1::JobInfo JobWithModel(const std::string& bytes) {
  v1::JobInfo job = Job("job-m", v1::SUCCEEDED, 100);
  v1::ModelFile* file = job.add_final_model();
  file->set_name("model-final.safetensors");
  file->set_size_bytes(static_cast<int64_t>(bytes.size()));
  file->set_sha256(Sha256Hex(bytes));
  return job;
}

TEST_F(CommandsTest, FetchWritesTheCheckedModelWithAProgressBarOnATerminal) {
  const std::string bytes(3000, 'm');
  service_.AddJob(JobWithModel(bytes));
  service_.SetModelFile("model-final.safetensors", bytes);
  tty_ = true;
  ASSERT_EQ(Herd({"fetch", "job-m", "--out", dir_.string()}), kExitOk) << err_.str();
  std::ifstream in(dir_ / "job-m.safetensors", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), bytes);
  EXPECT_THAT(out_.str(), HasSubstr((dir_ / "job-m.safetensors").string()));
  EXPECT_THAT(out_.str(), HasSubstr("from worker w1"));
  EXPECT_THAT(err_.str(), HasSubstr("100% 2.9 KiB / 2.9 KiB model-final.safetensors"));
}

TEST_F(CommandsTest, FetchRefusesAChangedFileAndWritesNothing) {
  service_.AddJob(JobWithModel("the recorded model"));
  service_.SetModelFile("model-final.safetensors", "another model!!!!!");
  EXPECT_EQ(Herd({"fetch", "job-m", "--out", dir_.string()}), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("DATA_LOSS"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "job-m.safetensors"));
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr("job-m"))) << "left behind";
  }
}

TEST_F(CommandsTest, FetchSaysWhyAJobHasNoModel) {
  service_.AddJob(Job("job-r", v1::RUNNING, 10));
  EXPECT_EQ(Herd({"fetch", "job-r", "--out", dir_.string()}), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("job job-r has no recorded model-final.safetensors: it is RUNNING"));
  EXPECT_EQ(Herd({"fetch", "job-r", "--out", (dir_ / "missing").string()}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--out " + (dir_ / "missing").string() + " is not a folder"));
}

TEST_F(CommandsTest, SubmitSendsTheParsedSpecAndPrintsTheId) {
  std::string path = WriteFile("job.yaml", kJobYaml);
  ASSERT_EQ(Herd({"submit", path}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-new\n");
  ASSERT_EQ(service_.submitted().size(), 1u);
  auto expected = ReadJobSpecFile(path);
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(service_.submitted()[0], *expected))
      << service_.submitted()[0].DebugString();
  EXPECT_EQ(service_.submitted()[0].name(), "fashion");
  EXPECT_EQ(service_.last_authorization(), "");  // no token configured
}

TEST_F(CommandsTest, SubmitPriorityFlagReplacesTheFilesPriority) {
  std::string path = WriteFile("job.yaml", std::string(kJobYaml) + "priority: 3\n");
  ASSERT_EQ(Herd({"submit", path, "--priority", "-7"}), kExitOk) << err_.str();
  ASSERT_EQ(service_.submitted().size(), 1u);
  EXPECT_EQ(service_.submitted()[0].priority(), -7);
  ASSERT_EQ(Herd({"submit", path}), kExitOk) << err_.str();
  EXPECT_EQ(service_.submitted()[1].priority(), 3);
  EXPECT_EQ(Herd({"submit", path, "--priority", "5000"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--priority"));
  EXPECT_EQ(service_.submitted().size(), 2u);
}

TEST_F(CommandsTest, PriorityAndResizeChangeTheJob) {
  service_.AddJob(Job("job-1", v1::RUNNING, 10));
  ASSERT_EQ(Herd({"priority", "job-1", "9"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-1 priority 9\n");
  ASSERT_EQ(Herd({"resize", "job-1", "--min", "1", "--max", "3", "-o", "json"}), kExitOk) << err_.str();
  nlohmann::json job = nlohmann::json::parse(out_.str());
  EXPECT_EQ(job["spec"]["min_workers"], 1);
  EXPECT_EQ(job["spec"]["max_workers"], 3);
  EXPECT_EQ(job["spec"]["priority"], 9);
  ASSERT_EQ(Herd({"resize", "job-1", "--max", "2"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-1 workers 1..2\n");
}

TEST_F(CommandsTest, PriorityAndResizeRefuseBadArgumentsAndUnknownJobs) {
  EXPECT_EQ(Herd({"resize", "job-1"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--min, --max"));
  EXPECT_EQ(Herd({"resize", "job-1", "--min", "0"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--min"));
  EXPECT_EQ(Herd({"priority", "job-1", "1001"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("P"));
  EXPECT_EQ(Herd({"priority", "job-1"}), kExitUsage);
  EXPECT_EQ(Herd({"priority", "nope", "1"}), kExitFailed);
  EXPECT_EQ(err_.str(), "herd: NOT_FOUND: no job nope\n");
  EXPECT_EQ(Herd({"resize", "nope", "--max", "2"}), kExitFailed);
  EXPECT_EQ(err_.str(), "herd: NOT_FOUND: no job nope\n");
}

TEST_F(CommandsTest, SubmitJsonPrintsTheJob) {
  ASSERT_EQ(Herd({"submit", WriteFile("job.yaml", kJobYaml), "-o", "json"}), kExitOk) << err_.str();
  nlohmann::json job = nlohmann::json::parse(out_.str());
  EXPECT_EQ(job["id"], "job-new");
  EXPECT_EQ(job["state"], "PENDING");
}

TEST_F(CommandsTest, SubmitRejectsAnInvalidFileNamingFileAndField) {
  std::string path = WriteFile("bad.yaml", std::string(kJobYaml) + "grad_accumulation: -1\n");
  EXPECT_EQ(Herd({"submit", path}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr(path));
  EXPECT_THAT(err_.str(), HasSubstr("grad_accumulation"));

  std::string typo = WriteFile("typo.yaml", std::string(kJobYaml) + "batchsize: 3\n");
  EXPECT_EQ(Herd({"submit", typo}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("typo.yaml: batchsize"));

  EXPECT_EQ(Herd({"submit", (dir_ / "missing.yaml").string()}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("missing.yaml"));
  EXPECT_TRUE(service_.submitted().empty());
}

TEST_F(CommandsTest, SendsTheBearerTokenFromTheEnvironmentOrFlag) {
  env_token_file_ = WriteTokenFile("token", "s3cret\n");
  ASSERT_EQ(Herd({"submit", WriteFile("job.yaml", kJobYaml)}), kExitOk) << err_.str();
  EXPECT_EQ(service_.last_authorization(), "Bearer s3cret");
  env_token_file_.clear();
  ASSERT_EQ(Herd({"submit", WriteFile("job.yaml", kJobYaml), "--token-file", WriteTokenFile("other", "t2")}), kExitOk);
  EXPECT_EQ(service_.last_authorization(), "Bearer t2");
  EXPECT_EQ(Herd({"list", "--token-file", (dir_ / "nope").string()}), kExitUsage);
  // A token file others may read is refused, as ssh refuses such keys.
  EXPECT_EQ(Herd({"list", "--token-file", WriteFile("shared", "t3")}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("permissions 0644 are too open"));
  env_token_file_ = WriteTokenFile("token", "s3cret\n");
  ASSERT_EQ(Herd({"submit", WriteFile("job.yaml", kJobYaml), "--insecure-no-auth"}), kExitOk);
  EXPECT_EQ(service_.last_authorization(), "");
}

TEST_F(CommandsTest, StatusJsonHasTheStableFieldNames) {
  v1::JobInfo job = Job("job-1", v1::RUNNING, 40);
  job.set_epoch(1);
  job.set_generation(2);
  job.set_samples_per_second(1234.5);
  (*job.mutable_eval())["accuracy"] = 0.5;
  service_.AddJob(job);
  ASSERT_EQ(Herd({"status", "job-1", "-o", "json"}), kExitOk) << err_.str();
  nlohmann::json parsed = nlohmann::json::parse(out_.str());
  EXPECT_EQ(parsed["id"], "job-1");
  EXPECT_EQ(parsed["name"], "mnist");
  EXPECT_EQ(parsed["state"], "RUNNING");
  EXPECT_EQ(parsed["samples_per_second"], 1234.5);
  EXPECT_EQ(parsed["eval"]["accuracy"], 0.5);
  for (const char* field : {"step", "epoch", "world_size", "generation", "loss", "total_steps", "reason"}) {
    EXPECT_TRUE(parsed.contains(field)) << field;
  }
  // Global options also work before the subcommand.
  ASSERT_EQ(Herd({"-o", "json", "status", "job-1"}), kExitOk);
  EXPECT_EQ(nlohmann::json::parse(out_.str())["id"], "job-1");
}

TEST_F(CommandsTest, StatusTableIsReadable) {
  v1::JobInfo job = Job("job-1", v1::FAILED, 40);
  job.set_reason("out of memory on w2");
  service_.AddJob(job);
  ASSERT_EQ(Herd({"status", "job-1"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("FAILED"));
  EXPECT_THAT(out_.str(), HasSubstr("out of memory on w2"));
}

TEST_F(CommandsTest, ListTableAndJson) {
  v1::JobInfo owned = Job("job-1", v1::RUNNING, 10);
  owned.set_owner("alice");
  service_.AddJob(owned);
  service_.AddJob(Job("job-2", v1::SUCCEEDED, 100));
  ASSERT_EQ(Herd({"list"}), kExitOk);
  std::vector<std::string> lines = OutLines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], StartsWith("ID     NAME   OWNER  STATE"));
  EXPECT_THAT(lines[1], StartsWith("job-1  mnist  alice  RUNNING    0     10/100"));
  EXPECT_THAT(lines[2], StartsWith("job-2  mnist  -      SUCCEEDED  0     100/100"));
  ASSERT_EQ(Herd({"list", "--output=json"}), kExitOk);
  nlohmann::json parsed = nlohmann::json::parse(out_.str());
  ASSERT_EQ(parsed["jobs"].size(), 2u);
  EXPECT_EQ(parsed["jobs"][1]["state"], "SUCCEEDED");
}

TEST_F(CommandsTest, CancelUnknownJobPrintsTheServersMessage) {
  EXPECT_EQ(Herd({"cancel", "nope"}), kExitFailed);
  EXPECT_EQ(err_.str(), "herd: NOT_FOUND: no job nope\n");
  service_.AddJob(Job("job-1", v1::RUNNING, 10));
  EXPECT_EQ(Herd({"cancel", "job-1"}), kExitOk);
  EXPECT_EQ(out_.str(), "job-1 CANCELLED\n");
}

TEST_F(CommandsTest, UnreachableCoordinatorExits3) {
  // A port nobody listens on: take a free one from a server we then stop.
  int port = 0;
  {
    FakeJobService placeholder;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&placeholder);
    builder.BuildAndStart()->Shutdown();
  }
  std::string dead = "127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(Herd({"list", "--coordinator", dead}), kExitUnreachable);
  EXPECT_EQ(err_.str(), "herd: cannot reach the coordinator at " + dead + ": connection refused\n");
}

TEST_F(CommandsTest, NoCoordinatorOfSeveralAnsweringIsSaidPlainly) {
  // Two ports nobody listens on (two servers started, then stopped).
  std::vector<std::string> dead;
  for (int i = 0; i < 2; ++i) {
    int port = 0;
    FakeJobService placeholder;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&placeholder);
    builder.BuildAndStart()->Shutdown();
    dead.push_back("127.0.0.1:" + std::to_string(port));
  }
  EXPECT_EQ(Herd({"status", "job-1", "--coordinator", dead[0] + "," + dead[1]}), kExitUnreachable);
  EXPECT_EQ(err_.str(),
            "herd: cannot reach the coordinator at " + dead[0] + ", " + dead[1] + ": connection refused\n");
}

TEST_F(CommandsTest, AnUnavailableCoordinatorThatAnsweredIsNotCalledUnreachable) {
  EXPECT_EQ(Herd({"status", "unstored"}), kExitUnreachable);
  EXPECT_EQ(err_.str(), "herd: the coordinator at " + address_ +
                            " is unavailable: state change not persisted: etcd txn failed\n");
}

TEST_F(CommandsTest, DeadlineOnEveryCall) {
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Herd({"status", "hangs", "--timeout", "0.3"}), kExitUnreachable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(err_.str(), StartsWith("herd: cannot reach the coordinator at "));
}

TEST_F(CommandsTest, WorkersAndCheckpoints) {
  ASSERT_EQ(Herd({"workers"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("w1  10.0.0.1  cpu x1  IDLE"));
  ASSERT_EQ(Herd({"workers", "-o", "json"}), kExitOk);
  EXPECT_EQ(nlohmann::json::parse(out_.str())["workers"][0]["device_kind"], "cpu");
  ASSERT_EQ(Herd({"checkpoints", "job-1"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("job-1/step-50"));
  ASSERT_EQ(Herd({"checkpoints", "job-1", "-o", "json"}), kExitOk);
  EXPECT_EQ(nlohmann::json::parse(out_.str())["checkpoints"][0]["job_id"], "job-1");
}

TEST_F(CommandsTest, DrainWaitReturnsOnceTheWorkerLeftOrGivesUpAfterItsTimeout) {
  service_.LeaveAfter(3, &clock_);
  ASSERT_EQ(Herd({"drain", "w1", "--wait", "-o", "json"}), kExitOk) << err_.str();
  const auto drained = nlohmann::json::parse(out_.str());
  EXPECT_EQ(drained["worker"]["state"], "IDLE") << out_.str();  // the last poll's, not the RPC's
  EXPECT_THAT(err_.str(), HasSubstr("waiting for w1 to leave job job-1"));

  service_.LeaveAfter(100, &clock_);
  EXPECT_EQ(Herd({"drain", "w1", "--wait", "--wait-timeout", "5"}), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("worker w1 still runs job job-1 after 5 s (--wait-timeout)"));

  // Without --wait it returns at once.
  service_.LeaveAfter(100, &clock_);
  ASSERT_EQ(Herd({"drain", "w1"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("w1 cordoned; leaves job job-1 at the next step boundary"));
}

TEST_F(CommandsTest, WatchExits0OnSuccess) {
  service_.AddJob(Job("job-1", v1::PENDING, 0));
  service_.SetEvents("job-1", {Job("job-1", v1::RUNNING, 10), Job("job-1", v1::RUNNING, 50),
                               Job("job-1", v1::SUCCEEDED, 100)});
  EXPECT_EQ(Herd({"watch", "job-1"}), kExitOk) << err_.str();
  std::vector<std::string> lines = OutLines();
  // Plain output: state changes always, other progress at most once per
  // second (the fake clock stands still, so step 50 is skipped).
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_EQ(lines[0], "PENDING");
  EXPECT_THAT(lines[1], StartsWith("RUNNING 10% step 10/100"));
  EXPECT_THAT(lines[2], StartsWith("SUCCEEDED | 100 steps"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("\r")));
}

TEST_F(CommandsTest, WatchExits1OnFailureAndShowsTheReason) {
  service_.AddJob(Job("job-1", v1::RUNNING, 10));
  v1::JobInfo failed = Job("job-1", v1::FAILED, 20);
  failed.set_reason("restart budget exhausted");
  service_.SetEvents("job-1", {failed});
  EXPECT_EQ(Herd({"watch", "job-1"}), kExitFailed);
  EXPECT_THAT(OutLines().back(), HasSubstr("FAILED"));
  EXPECT_THAT(OutLines().back(), HasSubstr("reason: restart budget exhausted"));
}

TEST_F(CommandsTest, WatchOfAFinishedJobEndsAtOnce) {
  service_.AddJob(Job("job-1", v1::CANCELLED, 10));
  EXPECT_EQ(Herd({"watch", "job-1"}), kExitFailed);
  EXPECT_THAT(out_.str(), StartsWith("CANCELLED"));
}

TEST_F(CommandsTest, WatchOnATerminalRedrawsOneLine) {
  tty_ = true;
  service_.AddJob(Job("job-1", v1::RUNNING, 10));
  service_.SetEvents("job-1", {Job("job-1", v1::RUNNING, 50), Job("job-1", v1::SUCCEEDED, 100)});
  EXPECT_EQ(Herd({"watch", "job-1"}), kExitOk);
  EXPECT_THAT(out_.str(), StartsWith("\r[##..................] 10% step 10/100"));
  EXPECT_THAT(out_.str(), HasSubstr("\r[##########..........] 50% step 50/100"));
  EXPECT_THAT(out_.str(), HasSubstr("\nSUCCEEDED | 100 steps"));
}

TEST_F(CommandsTest, WatchJsonPrintsOneObjectPerEvent) {
  service_.AddJob(Job("job-1", v1::RUNNING, 10));
  service_.SetEvents("job-1", {Job("job-1", v1::RUNNING, 10), Job("job-1", v1::RUNNING, 50),
                               Job("job-1", v1::SUCCEEDED, 100)});
  EXPECT_EQ(Herd({"watch", "job-1", "-o", "json"}), kExitOk);
  std::vector<std::string> lines = OutLines();
  ASSERT_EQ(lines.size(), 3u) << out_.str();  // the repeated first state is shown once
  EXPECT_EQ(nlohmann::json::parse(lines[0])["step"], 10);  // 64-bit counters print as JSON numbers
  EXPECT_EQ(nlohmann::json::parse(lines[2])["state"], "SUCCEEDED");
}

TEST_F(CommandsTest, SubmitWatchFollowsTheNewJob) {
  service_.SetEvents("job-new", {Job("job-new", v1::RUNNING, 10), Job("job-new", v1::FAILED, 20)});
  EXPECT_EQ(Herd({"submit", WriteFile("job.yaml", kJobYaml), "--watch"}), kExitFailed);
  std::vector<std::string> lines = OutLines();
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0], "job-new");
  EXPECT_THAT(lines.back(), StartsWith("FAILED"));
}

TEST_F(CommandsTest, UsageErrorsExit2AndHelpExits0) {
  EXPECT_EQ(Herd({}), kExitUsage);
  EXPECT_EQ(Herd({"frobnicate"}), kExitUsage);
  EXPECT_EQ(Herd({"status"}), kExitUsage);  // JOB missing
  EXPECT_EQ(Herd({"list", "-o", "yaml"}), kExitUsage);
  EXPECT_EQ(Herd({"--help"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("checkpoints"));
  EXPECT_EQ(Herd({"watch", "--help"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("--timeout"));
}

TEST_F(CommandsTest, VersionNeedsNoSubcommand) {
  EXPECT_EQ(Herd({"--version"}), kExitOk);
  EXPECT_EQ(out_.str(), std::string("herd ") + kVersion + "\n");
}

}  // namespace
}  // namespace herd::client
