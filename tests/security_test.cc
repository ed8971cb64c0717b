// Roles, owners, quotas, safe output and private files against a real
// herd-coordinator (and the real CLI and herd-worker binaries). Workers
// here are played by the test through the generated gRPC stubs, as an
// attacker holding a worker credential would: no trainers run.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "common/auth.h"
#include "common/sha256.h"
#include "common/rpc_options.h"
#include "proto/herd.grpc.pb.h"
#include "tests/harness/http_client.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/test_certificates.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

ClusterOptions NoWorkers() {
  ClusterOptions options;
  options.workers = 0;
  return options;
}

constexpr char kPendingJob[] = R"(
name: waits
model: mlp
dataset: {kind: synthetic, synthetic_samples: 64, synthetic_features: 8}
batch_size: 8
max_steps: 4
min_workers: 1
max_workers: 1
)";

// One principal's gRPC view of the coordinator.
class Caller {
 public:
  // An empty `token_file`: no token (a client certificate in `tls`, or nothing).
  Caller(const std::string& address, const std::string& token_file, const TlsOptions& tls = {}) {
    if (!token_file.empty()) {
      auto token = ReadTokenFile(token_file);
      EXPECT_TRUE(token.ok()) << token.status();
      token_ = token.value_or("");
    }
    auto channel = MakeChannel(address, tls);
    EXPECT_TRUE(channel.ok()) << channel.status();
    jobs = v1::JobService::NewStub(*channel);
    cluster = v1::ClusterService::NewStub(*channel);
  }
  std::unique_ptr<grpc::ClientContext> Context() const { return NewCallContext(token_, seconds(20)); }

  grpc::Status Register(const std::string& worker_id) const {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(worker_id);
    request.set_address("127.0.0.1");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    v1::RegisterWorkerResponse response;
    return cluster->RegisterWorker(Context().get(), request, &response);
  }
  grpc::Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response = nullptr) const {
    v1::HeartbeatResponse ignored;
    return cluster->Heartbeat(Context().get(), request, response ? response : &ignored);
  }
  grpc::Status Heartbeat(const std::string& worker_id) const {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker_id);
    return Heartbeat(request);
  }
  grpc::Status KvSet(const std::string& job, int64_t generation, const std::string& key,
                     const std::string& value) const {
    v1::KvSetRequest request;
    request.set_job_id(job);
    request.set_generation(generation);
    request.set_key(key);
    request.set_value(value);
    v1::KvSetResponse response;
    return cluster->KvSet(Context().get(), request, &response);
  }

  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;

 private:
  std::string token_;
};

// Registers `worker_id` through `worker`, lets user alice submit a one-worker
// job, and joins the generation the coordinator forms with that worker.
v1::JoinGenerationResponse JoinAsOnlyMember(LocalCluster& cluster, const Caller& worker,
                                            const std::string& worker_id, std::string* job_id) {
  EXPECT_TRUE(worker.Register(worker_id).ok());
  *job_id = cluster.Submit(kPendingJob);
  // The coordinator assigns the job at its next scheduling round; the
  // heartbeat answer says when.
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker_id);
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  bool assigned = false;
  while (!assigned && std::chrono::steady_clock::now() < deadline) {
    v1::HeartbeatResponse response;
    EXPECT_TRUE(worker.Heartbeat(beat, &response).ok());
    for (const auto& assignment : response.assignments()) assigned |= assignment.job_id() == *job_id;
    if (!assigned) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(assigned) << cluster.Logs();
  v1::JoinGenerationRequest join;
  join.set_job_id(*job_id);
  join.set_worker_id(worker_id);
  join.set_wait_ms(10000);
  v1::JoinGenerationResponse joined;
  grpc::Status status = worker.cluster->JoinGeneration(worker.Context().get(), join, &joined);
  EXPECT_TRUE(status.ok()) << status.error_message() << cluster.Logs();
  return joined;
}

std::string CoordinatorMetrics(const LocalCluster& cluster) {
  auto page = HttpGet(cluster.coordinator_metrics_address(), "/metrics");
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? page->body : "";
}

// A copy of `source` with `mode`.
std::string CopyWithMode(const std::string& source, const std::string& target, mode_t mode) {
  std::filesystem::copy_file(source, target, std::filesystem::copy_options::overwrite_existing);
  chmod(target.c_str(), mode);
  return target;
}

TEST(Security, AUserCredentialIsRefusedByEveryClusterMethod) {
  LocalCluster cluster(NoWorkers());
  Caller alice(cluster.address(), cluster.credentials().user_token_file);
  std::map<std::string, grpc::Status> calls;
  calls["RegisterWorker"] = alice.Register("worker-0");
  calls["Heartbeat"] = alice.Heartbeat("worker-0");
  {
    v1::JoinGenerationRequest request;
    request.set_worker_id("worker-0");
    v1::JoinGenerationResponse response;
    calls["JoinGeneration"] = alice.cluster->JoinGeneration(alice.Context().get(), request, &response);
  }
  calls["KvSet"] = alice.KvSet("job-x", 1, "rank0", "198.18.0.1");
  {
    v1::KvGetRequest request;
    request.set_key("rank0");
    v1::KvGetResponse response;
    calls["KvGet"] = alice.cluster->KvGet(alice.Context().get(), request, &response);
  }
  {
    v1::KvAddRequest request;
    request.set_key("barrier");
    v1::KvAddResponse response;
    calls["KvAdd"] = alice.cluster->KvAdd(alice.Context().get(), request, &response);
  }
  {
    v1::ReportProgressRequest request;
    v1::ReportProgressResponse response;
    calls["ReportProgress"] = alice.cluster->ReportProgress(alice.Context().get(), request, &response);
  }
  {
    v1::CommitCheckpointRequest request;
    request.set_path("job-x/step-1");
    v1::CommitCheckpointResponse response;
    calls["CommitCheckpoint"] = alice.cluster->CommitCheckpoint(alice.Context().get(), request, &response);
  }
  {
    v1::ReportFailureRequest request;
    request.set_worker_id("worker-0");
    v1::ReportFailureResponse response;
    calls["ReportFailure"] = alice.cluster->ReportFailure(alice.Context().get(), request, &response);
  }
  {
    v1::WatchLogRequestsRequest request;
    request.set_worker_id("worker-0");
    auto context = alice.Context();
    auto reader = alice.cluster->WatchLogRequests(context.get(), request);
    v1::LogRequest ignored;
    while (reader->Read(&ignored)) {
    }
    calls["WatchLogRequests"] = reader->Finish();
  }
  {
    auto context = alice.Context();
    v1::UploadLogResponse response;
    auto writer = alice.cluster->UploadLog(context.get(), &response);
    v1::UploadLogRequest message;
    message.set_session("log-1");
    message.set_worker_id("worker-0");
    writer->Write(message);
    writer->WritesDone();
    calls["UploadLog"] = writer->Finish();
  }
  // Every method of the service is covered: a new one must be added here.
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName("herd.v1.ClusterService");
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(static_cast<int>(calls.size()), service->method_count());
  for (const auto& [method, status] : calls) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method << ": " << status.error_message();
    EXPECT_NE(status.error_message().find("principal 'alice' has role user"), std::string::npos)
        << status.error_message();
  }
  // Nothing took effect, and each refusal was audited.
  nlohmann::json workers = cluster.HerdJson({"workers"});
  EXPECT_TRUE(workers.value("workers", nlohmann::json::array()).empty()) << workers.dump();
  EXPECT_NE(CoordinatorMetrics(cluster).find("herd_coordinator_audit_events_total{code=\"PERMISSION_DENIED\","
                                             "event=\"permission_denied\",principal=\"alice\"} 11"),
            std::string::npos);
  EXPECT_NE(cluster.coordinator().Log().find("audit: permission_denied by 'alice': RegisterWorker"),
            std::string::npos);
}

TEST(Security, AWorkerCredentialActsOnlyForItsOwnWorkerIds) {
  LocalCluster cluster(NoWorkers());
  Caller workers(cluster.address(), cluster.credentials().worker_token_file);
  Caller outsiders(cluster.address(), cluster.credentials().outside_worker_token_file);
  // "outsiders" may act as outside-*; "workers" as worker-*.
  ASSERT_TRUE(outsiders.Register("outside-1").ok());
  ASSERT_TRUE(outsiders.Heartbeat("outside-1").ok());
  std::string job_id;
  v1::JoinGenerationResponse joined = JoinAsOnlyMember(cluster, workers, "worker-a", &job_id);
  ASSERT_GT(joined.generation(), 0);

  grpc::Status registered = outsiders.Register("worker-a");
  EXPECT_EQ(registered.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(registered.error_message().find("principal 'outsiders' may not act as worker 'worker-a'"),
            std::string::npos)
      << registered.error_message();
  EXPECT_EQ(outsiders.Heartbeat("worker-a").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(workers.Register("outside-1").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(workers.Heartbeat("outside-1").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  {
    v1::JoinGenerationRequest request;
    request.set_job_id(job_id);
    request.set_worker_id("worker-a");
    v1::JoinGenerationResponse response;
    EXPECT_EQ(outsiders.cluster->JoinGeneration(outsiders.Context().get(), request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    v1::ReportFailureRequest request;
    request.set_job_id(job_id);
    request.set_generation(joined.generation());
    request.set_worker_id("worker-a");
    v1::ReportFailureResponse response;
    EXPECT_EQ(outsiders.cluster->ReportFailure(outsiders.Context().get(), request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // The rendezvous keys belong to the generation's members: a worker of
  // another scope can neither take a rank nor read them.
  ASSERT_TRUE(workers.KvSet(job_id, joined.generation(), joined.kv_prefix() + "rank0", "127.0.0.1:1").ok());
  grpc::Status poisoned = outsiders.KvSet(job_id, joined.generation(), joined.kv_prefix() + "rank0", "evil:1");
  EXPECT_EQ(poisoned.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(poisoned.error_message().find("speaks for no member of job " + job_id), std::string::npos)
      << poisoned.error_message();
  {
    v1::KvGetRequest request;
    request.set_job_id(job_id);
    request.set_generation(joined.generation());
    request.set_key(joined.kv_prefix() + "rank0");
    v1::KvGetResponse response;
    EXPECT_EQ(outsiders.cluster->KvGet(outsiders.Context().get(), request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    ASSERT_TRUE(workers.cluster->KvGet(workers.Context().get(), request, &response).ok());
    EXPECT_EQ(response.value(), "127.0.0.1:1");
  }
  {
    v1::ReportProgressRequest request;
    request.set_job_id(job_id);
    request.set_generation(joined.generation());
    request.set_rank(0);
    request.set_step(1000);
    v1::ReportProgressResponse response;
    EXPECT_EQ(outsiders.cluster->ReportProgress(outsiders.Context().get(), request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(cluster.HerdJson({"status", job_id}).value("step", -1), 0);
}

TEST(Security, AWorkerCredentialCannotSubmitOrReadJobs) {
  LocalCluster cluster(NoWorkers());
  Caller workers(cluster.address(), cluster.credentials().worker_token_file);
  v1::SubmitJobRequest request;
  request.mutable_spec()->mutable_model()->set_name("mlp");
  request.mutable_spec()->mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  request.mutable_spec()->set_batch_size(8);
  v1::SubmitJobResponse response;
  grpc::Status submitted = workers.jobs->SubmitJob(workers.Context().get(), request, &response);
  EXPECT_EQ(submitted.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(submitted.error_message().find("the job API is for users and admins"), std::string::npos)
      << submitted.error_message();
  const std::string path = cluster.root() + "/job.yaml";
  std::ofstream(path) << kPendingJob;
  CommandResult cli = cluster.HerdAs(cluster.credentials().worker_token_file, {"submit", path});
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_NE(cli.err.find("PERMISSION_DENIED"), std::string::npos) << cli.err;
  EXPECT_EQ(cluster.HerdAs(cluster.credentials().worker_token_file, {"list"}).exit_code, 1);
  EXPECT_TRUE(cluster.HerdJson({"list"}).value("jobs", nlohmann::json::array()).empty());
}

TEST(Security, UsersCancelOnlyTheirOwnJobsAdminsAny) {
  LocalCluster cluster(NoWorkers());
  const std::string job = cluster.Submit(kPendingJob);  // as alice
  nlohmann::json listed = cluster.HerdJson({"list"});
  ASSERT_EQ(listed["jobs"].size(), 1);
  EXPECT_EQ(listed["jobs"][0].value("owner", ""), "alice");
  CommandResult table = cluster.Herd({"list"});
  EXPECT_NE(table.out.find("OWNER"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("alice"), std::string::npos) << table.out;

  CommandResult by_bob = cluster.HerdAs(cluster.credentials().other_user_token_file, {"cancel", job});
  EXPECT_EQ(by_bob.exit_code, 1);
  EXPECT_NE(by_bob.err.find("PERMISSION_DENIED: job " + job + " belongs to 'alice'; 'bob' may change only their own"),
            std::string::npos)
      << by_bob.err;
  EXPECT_EQ(cluster.HerdJson({"status", job}).value("state", ""), "PENDING");

  CommandResult by_admin = cluster.HerdAs(cluster.credentials().admin_token_file, {"cancel", job});
  EXPECT_EQ(by_admin.exit_code, 0) << by_admin.err;
  EXPECT_EQ(cluster.HerdJson({"status", job}).value("state", ""), "CANCELLED");
  const std::string log = cluster.coordinator().Log();
  EXPECT_NE(log.find("audit: submit by 'alice': " + job), std::string::npos);
  EXPECT_NE(log.find("audit: permission_denied by 'bob': cancel " + job), std::string::npos);
  EXPECT_NE(log.find("audit: cancel by 'ops': cancel " + job + ": ok"), std::string::npos);
  const std::string metrics = CoordinatorMetrics(cluster);
  EXPECT_NE(metrics.find("herd_coordinator_audit_events_total{code=\"OK\",event=\"cancel\",principal=\"ops\"} 1"),
            std::string::npos);
}

TEST(Security, UsersReprioritizeAndResizeOnlyTheirOwnJobsAdminsAny) {
  LocalCluster cluster(NoWorkers());
  const std::string job = cluster.Submit(kPendingJob);  // as alice
  CommandResult by_bob = cluster.HerdAs(cluster.credentials().other_user_token_file, {"priority", job, "50"});
  EXPECT_EQ(by_bob.exit_code, 1);
  EXPECT_NE(by_bob.err.find("PERMISSION_DENIED: job " + job + " belongs to 'alice'"), std::string::npos) << by_bob.err;
  by_bob = cluster.HerdAs(cluster.credentials().other_user_token_file, {"resize", job, "--max", "3"});
  EXPECT_EQ(by_bob.exit_code, 1);
  EXPECT_NE(by_bob.err.find("PERMISSION_DENIED"), std::string::npos) << by_bob.err;
  nlohmann::json status = cluster.HerdJson({"status", job});
  EXPECT_EQ(status["spec"].value("priority", 0), 0);

  CommandResult by_owner = cluster.Herd({"priority", job, "5"});
  EXPECT_EQ(by_owner.exit_code, 0) << by_owner.err;
  CommandResult by_admin = cluster.HerdAs(cluster.credentials().admin_token_file, {"resize", job, "--max", "3"});
  EXPECT_EQ(by_admin.exit_code, 0) << by_admin.err;
  status = cluster.HerdJson({"status", job});
  EXPECT_EQ(status["spec"].value("priority", 0), 5);
  EXPECT_EQ(status["spec"].value("max_workers", 0), 3);
  // Refused by the coordinator's validation, naming the field.
  CommandResult invalid = cluster.Herd({"resize", job, "--min", "4"});
  EXPECT_EQ(invalid.exit_code, 1);
  EXPECT_NE(invalid.err.find("INVALID_ARGUMENT: max_workers: must be >= min_workers (4)"), std::string::npos)
      << invalid.err;
  const std::string log = cluster.coordinator().Log();
  EXPECT_NE(log.find("audit: permission_denied by 'bob': priority " + job + " 50"), std::string::npos) << log;
  EXPECT_NE(log.find("audit: resize by 'ops': resize " + job + " to 0-3: ok"), std::string::npos) << log;
}

TEST(Security, PendingJobsPerUserAreCapped) {
  ClusterOptions options = NoWorkers();
  options.coordinator_args = {"--max-pending-jobs-per-user=2"};
  LocalCluster cluster(options);
  cluster.Submit(kPendingJob);
  cluster.Submit(kPendingJob);
  const std::string path = cluster.root() + "/third.yaml";
  std::ofstream(path) << kPendingJob;
  CommandResult third = cluster.Herd({"submit", path});
  EXPECT_EQ(third.exit_code, 1);
  EXPECT_NE(third.err.find("RESOURCE_EXHAUSTED: 'alice' already has 2 pending jobs; the limit is 2 per user "
                           "(herd-coordinator --max-pending-jobs-per-user)"),
            std::string::npos)
      << third.err;
  EXPECT_EQ(cluster.HerdAs(cluster.credentials().other_user_token_file, {"submit", path}).exit_code, 0);
}

TEST(Security, KvBeyondTheGenerationBudgetIsResourceExhaustedAndTheCoordinatorServesOn) {
  LocalCluster cluster(NoWorkers());
  Caller workers(cluster.address(), cluster.credentials().worker_token_file);
  std::string job_id;
  v1::JoinGenerationResponse joined = JoinAsOnlyMember(cluster, workers, "worker-a", &job_id);
  ASSERT_GT(joined.generation(), 0);
  const std::string mib(1 << 20, 'x');
  int accepted = 0;
  grpc::Status status;
  while (accepted < 300) {  // 300 values of 1 MiB, past the budget
    status = workers.KvSet(job_id, joined.generation(), joined.kv_prefix() + std::to_string(accepted), mib);
    if (!status.ok()) break;
    ++accepted;
  }
  // 16 MiB per generation by default: 15 values and their keys fit.
  EXPECT_EQ(accepted, 15);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("the limit is 16777216 bytes per generation "
                                        "(herd-coordinator --kv-max-generation-bytes)"),
            std::string::npos)
      << status.error_message();
  // It keeps serving: small rendezvous writes, reads, and the job API.
  EXPECT_TRUE(workers.KvSet(job_id, joined.generation(), joined.kv_prefix() + "0", "small").ok());
  EXPECT_TRUE(workers.KvSet(job_id, joined.generation(), joined.kv_prefix() + "rank0", "127.0.0.1:1").ok());
  EXPECT_TRUE(workers.Heartbeat("worker-a").ok());
  EXPECT_EQ(cluster.Herd({"list"}).exit_code, 0);
}

TEST(Security, ControlCharactersAreRefusedInNamesAndPrintedEscaped) {
  LocalCluster cluster(NoWorkers());
  const std::string evil = "evil\x1b]0;pwned\x07\x1b[2J";
  Caller alice(cluster.address(), cluster.credentials().user_token_file);
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_name(evil);
  request.mutable_spec()->mutable_model()->set_name("mlp");
  request.mutable_spec()->mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  request.mutable_spec()->set_batch_size(8);
  v1::SubmitJobResponse response;
  grpc::Status refused = alice.jobs->SubmitJob(alice.Context().get(), request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message().rfind("name: must not contain control characters", 0), 0)
      << refused.error_message();
  const std::string path = cluster.root() + "/evil.yaml";
  std::ofstream(path) << "name: \"evil\\e]0;pwned\\a\\e[2J\"\nmodel: mlp\ndataset: {kind: synthetic}\nbatch_size: 8\n";
  CommandResult cli = cluster.Herd({"submit", path});
  EXPECT_EQ(cli.exit_code, 2);
  EXPECT_NE(cli.err.find("name: must not contain control characters"), std::string::npos) << cli.err;
  EXPECT_EQ(cli.err.find('\x1b'), std::string::npos);

  // A failure reason comes from a worker: the trainer's message, verbatim.
  Caller workers(cluster.address(), cluster.credentials().worker_token_file);
  std::string job_id;
  v1::JoinGenerationResponse joined = JoinAsOnlyMember(cluster, workers, "worker-a", &job_id);
  const std::string reason = "data missing \x1b[2J\x1b]0;owned\x07 at /data/\x1b[31mred";
  v1::HeartbeatRequest beat;
  beat.set_worker_id("worker-a");
  v1::TrainerExit* exit = beat.add_exits();
  exit->set_job_id(job_id);
  exit->set_generation(joined.generation());
  exit->set_exit_code(v1::TRAINER_EXIT_JOB_ERROR);
  exit->set_message(reason);
  ASSERT_TRUE(workers.Heartbeat(beat).ok());
  nlohmann::json failed = cluster.WaitForState(job_id, {"FAILED"}, seconds(30));
  // JSON stays exact.
  EXPECT_NE(failed.value("reason", "").find(reason), std::string::npos) << failed.dump();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", job_id}, std::vector<std::string>{"watch", job_id}}) {
    CommandResult shown = cluster.Herd(args);
    EXPECT_EQ(shown.out.find('\x1b'), std::string::npos) << args[0];
    EXPECT_EQ(shown.out.find('\x07'), std::string::npos) << args[0];
    EXPECT_NE(shown.out.find("data missing \\x1b[2J\\x1b]0;owned\\x07 at /data/\\x1b[31mred"), std::string::npos)
        << args[0] << ": " << shown.out;
  }
}

TEST(Security, TokenAndAuthFilesOthersCanReadAreRefused) {
  LocalCluster cluster(NoWorkers());
  struct stat state {};
  ASSERT_EQ(stat((cluster.root() + "/state").c_str(), &state), 0);
  EXPECT_EQ(state.st_mode & 07777, 0700);

  const std::string user_token =
      CopyWithMode(cluster.credentials().user_token_file, cluster.root() + "/open-user-token", 0644);
  CommandResult cli = cluster.HerdAs(user_token, {"list"});
  EXPECT_EQ(cli.exit_code, 2);
  EXPECT_NE(cli.err.find("token file " + user_token + ": permissions 0644 are too open"), std::string::npos)
      << cli.err;

  const std::string worker_token =
      CopyWithMode(cluster.credentials().worker_token_file, cluster.root() + "/open-worker-token", 0640);
  CommandResult worker = RunCommand({LocalCluster::Binary("worker/daemon/herd-worker"),
                                     "--coordinator=" + cluster.address(), "--worker-id=worker-open",
                                     "--work-dir=" + cluster.root() + "/worker-open", "--metrics-listen=",
                                     "--token-file=" + worker_token,
                                     "--trainer-binary=" + LocalCluster::Binary("worker/train/herd-trainer")},
                                    seconds(20));
  EXPECT_EQ(worker.exit_code, 2);
  EXPECT_NE(worker.err.find("permissions 0640 are too open"), std::string::npos) << worker.err;

  const std::string auth = CopyWithMode(cluster.credentials().auth_file, cluster.root() + "/open-auth", 0604);
  CommandResult coordinator =
      RunCommand({LocalCluster::Binary("coordinator/herd-coordinator"), "--listen=127.0.0.1:0", "--metrics-listen=",
                  "--state-dir=" + cluster.root() + "/other-state", "--auth-file=" + auth},
                 seconds(20));
  EXPECT_EQ(coordinator.exit_code, 1);
  EXPECT_NE(coordinator.err.find("auth file " + auth + ": permissions 0604 are too open"), std::string::npos)
      << coordinator.err;
}

TEST(Security, SighupReloadsTheAuthFile) {
  LocalCluster cluster(NoWorkers());
  const std::string carol_token = cluster.root() + "/carol-token";
  WritePrivateFile(carol_token, "carol-secret-token\n");
  EXPECT_EQ(cluster.HerdAs(carol_token, {"list"}).exit_code, 1);
  // Rotation: carol is added, alice's token is replaced.
  const std::string alice_new = cluster.root() + "/alice-new-token";
  WritePrivateFile(alice_new, "alice-new-secret\n");
  WritePrivateFile(cluster.credentials().auth_file,
                   ReadFile(cluster.credentials().auth_file) + "carol user sha256:" + Sha256Hex("carol-secret-token") +
                       "\n");
  std::string auth = ReadFile(cluster.credentials().auth_file);
  const std::string old_alice = "sha256:" + Sha256Hex(ReadTokenFile(cluster.credentials().user_token_file).value());
  ASSERT_NE(auth.find(old_alice), std::string::npos);
  auth.replace(auth.find(old_alice), old_alice.size(), "sha256:" + Sha256Hex("alice-new-secret"));
  WritePrivateFile(cluster.credentials().auth_file, auth);
  cluster.coordinator().Signal(SIGHUP);
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (cluster.coordinator().Log().find("SIGHUP: auth file reloaded") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(cluster.HerdAs(carol_token, {"list"}).exit_code, 0) << cluster.Logs();
  EXPECT_EQ(cluster.HerdAs(alice_new, {"list"}).exit_code, 0);
  CommandResult old = cluster.Herd({"list"});
  EXPECT_EQ(old.exit_code, 1);
  EXPECT_NE(old.err.find("UNAUTHENTICATED"), std::string::npos) << old.err;
  // A broken file is refused and the loaded one stays.
  WritePrivateFile(cluster.credentials().auth_file, "carol boss sha256:00\n");
  cluster.coordinator().Signal(SIGHUP);
  while (cluster.coordinator().Log().find("SIGHUP: auth file not reloaded") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline + seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(cluster.coordinator().Log().find(":1: unknown role 'boss'"), std::string::npos);
  EXPECT_EQ(cluster.HerdAs(carol_token, {"list"}).exit_code, 0);
}

// Under mutual TLS the identity comes from the client certificate: the auth
// file's cert: lines give it a principal, a role and worker ids.
TEST(Security, MutualTlsIdentityComesFromTheClientCertificate) {
  const std::string dir = ::testing::TempDir() + "/mtls";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const absl::Status made = MakeCertificates(dir, {"node-7", "alice-laptop", "stranger"});
  ASSERT_TRUE(made.ok()) << made;
  WritePrivateFile(dir + "/auth",
                   "node-7 worker cert:node-7 node-7\n"
                   "alice-laptop user cert:alice-laptop\n");
  Process coordinator({LocalCluster::Binary("coordinator/herd-coordinator"), "--listen=127.0.0.1:0",
                       "--metrics-listen=", "--state-dir=" + dir + "/state", "--auth-file=" + dir + "/auth",
                       "--tls-cert=" + dir + "/server.crt", "--tls-key=" + dir + "/server.key",
                       "--tls-ca=" + dir + "/ca.crt", "--tls-require-client-cert", "--ready-file=" + dir + "/ready"},
                      dir + "/coordinator.log");
  ASSERT_TRUE(WaitForFile(dir + "/ready", seconds(30))) << coordinator.Log();
  const std::string address = nlohmann::json::parse(ReadFile(dir + "/ready"))["listen"].get<std::string>();
  auto as = [&](const std::string& name) {
    return std::make_unique<Caller>(address, "", TlsOptions{dir + "/ca.crt", dir + "/" + name + ".crt",
                                                            dir + "/" + name + ".key"});
  };
  auto node = as("node-7");
  EXPECT_TRUE(node->Register("node-7").ok());
  grpc::Status other = node->Register("node-8");
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED) << other.error_message();
  EXPECT_NE(other.error_message().find("principal 'node-7' may not act as worker 'node-8'"), std::string::npos);
  v1::ListJobsResponse jobs;
  EXPECT_EQ(node->jobs->ListJobs(node->Context().get(), {}, &jobs).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  auto alice = as("alice-laptop");
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->mutable_model()->set_name("mlp");
  submit.mutable_spec()->mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  submit.mutable_spec()->set_batch_size(8);
  v1::SubmitJobResponse submitted;
  grpc::Status status = alice->jobs->SubmitJob(alice->Context().get(), submit, &submitted);
  ASSERT_TRUE(status.ok()) << status.error_message() << coordinator.Log();
  EXPECT_EQ(submitted.job().owner(), "alice-laptop");
  EXPECT_EQ(alice->Register("alice-laptop").error_code(), grpc::StatusCode::PERMISSION_DENIED);

  auto stranger = as("stranger");
  grpc::Status unknown = stranger->jobs->ListJobs(stranger->Context().get(), {}, &jobs);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(unknown.error_message().find("client certificate 'stranger' is not in the auth file"), std::string::npos)
      << unknown.error_message();
  coordinator.Signal(SIGTERM);
  EXPECT_EQ(coordinator.Wait(seconds(15)), 0);
}

}  // namespace
}  // namespace herd::testing
