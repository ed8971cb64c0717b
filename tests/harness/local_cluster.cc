#include "tests/harness/local_cluster.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace herd::testing {
namespace {

namespace fs = std::filesystem;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string TempRoot() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/cluster.XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  return mkdtemp(buffer.data());
}

}  // namespace

int LocalCluster::FreeLocalPort() { return FreePort(); }

std::string LocalCluster::Binary(const std::string& package_path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  fs::path path = fs::path(srcdir ? srcdir : ".") / "herd" / package_path;
  return fs::absolute(path).string();
}

LocalCluster::LocalCluster(ClusterOptions options) : options_(options), root_(TempRoot()) {
  if (options_.coordinator_port == 0) options_.coordinator_port = FreePort();
  address_ = options_.coordinator_host + ":" + std::to_string(options_.coordinator_port);
  credentials_ = WriteTestCredentials(root_);
  workers_.resize(options_.workers);
  StartCoordinator();
  for (int i = 0; i < options_.workers; ++i) StartWorker(i);
  EXPECT_TRUE(WaitForAliveWorkers(options_.workers, std::chrono::seconds(30))) << Logs();
}

LocalCluster::~LocalCluster() {
  for (auto& w : workers_) {
    if (w) w->Signal(SIGINT);  // stop now: SIGTERM would drain
  }
  for (auto& w : workers_) {
    if (w && !w->Wait(std::chrono::seconds(15))) w->Signal(SIGKILL);
  }
  if (coordinator_) coordinator_->Signal(SIGTERM);
  if (::testing::Test::HasFailure()) std::cerr << Logs();
}

void LocalCluster::StartCoordinator() {
  const std::string ready = root_ + "/coordinator.json";
  fs::remove(ready);
  std::vector<std::string> argv = options_.coordinator_exec_prefix;
  argv.insert(argv.end(), {Binary("coordinator/herd-coordinator"),
                           "--listen=" + address_,
                           "--metrics-listen=" + options_.coordinator_host + ":0",
                           options_.store.empty() ? "--state-dir=" + state_dir() : "--store=" + options_.store,
                           "--lease-seconds=" + std::to_string(options_.lease_seconds),
                           "--ready-file=" + ready});
  argv.push_back(options_.auth ? "--auth-file=" + credentials_.auth_file : "--insecure-no-auth");
  argv.insert(argv.end(), options_.coordinator_args.begin(), options_.coordinator_args.end());
  coordinator_ = std::make_unique<Process>(argv, root_ + "/coordinator.log");
  ASSERT_TRUE(WaitForFile(ready, std::chrono::seconds(30))) << Logs();
}

void LocalCluster::StopCoordinator(int signal) {
  coordinator_->Signal(signal);
  coordinator_->Wait(std::chrono::seconds(10));
}

std::string LocalCluster::coordinator_metrics_address() const {
  auto ready = nlohmann::json::parse(ReadFile(root_ + "/coordinator.json"));
  return ready["metrics"].get<std::string>();
}

std::string LocalCluster::worker_dir(int index) const { return root_ + "/" + worker_id(index); }

std::string LocalCluster::job_dir(int worker_index, const std::string& job_id) const {
  return worker_dir(worker_index) + "/jobs/" + job_id;
}

void LocalCluster::StartWorker(int index) {
  WorkerHost host{"127.0.0.1", {}};
  if (!options_.worker_hosts.empty()) host = options_.worker_hosts[index % options_.worker_hosts.size()];
  std::vector<std::string> argv = host.exec_prefix;
  argv.insert(argv.end(), {Binary("worker/daemon/herd-worker"),
                           "--coordinator=" + coordinator_addresses(),
                           "--worker-id=" + worker_id(index),
                           "--work-dir=" + worker_dir(index),
                           "--listen=" + host.address,
                           "--metrics-listen=" + host.address + ":0",
                           "--trainer-binary=" + Binary("worker/train/herd-trainer"),
                           "--trainer-kill-grace-seconds=2",
                           "--ready-file=" + root_ + "/" + worker_id(index) + ".json"});
  argv.push_back(options_.auth ? "--token-file=" + credentials_.worker_token_file : "--insecure-no-auth");
  // One checkpoint root for all workers, as shared storage would be on a
  // real cluster: any rank of a later generation must find rank 0's files.
  argv.push_back("--checkpoint-root=" + checkpoint_root());
  if (index < static_cast<int>(options_.worker_args.size())) {
    argv.insert(argv.end(), options_.worker_args[index].begin(), options_.worker_args[index].end());
  }
  std::vector<std::string> env = options_.worker_env;
  if (index >= static_cast<int>(workers_.size())) workers_.resize(index + 1);
  workers_[index] = std::make_unique<Process>(argv, root_ + "/" + worker_id(index) + ".log", env);
}

CommandResult LocalCluster::Herd(std::vector<std::string> args, std::chrono::milliseconds timeout) {
  return HerdAs(options_.auth ? credentials_.user_token_file : "", std::move(args), timeout);
}

CommandResult LocalCluster::HerdAs(const std::string& token_file, std::vector<std::string> args,
                                   std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {Binary("client/herd")};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env = {"HERD_COORDINATOR=" + coordinator_addresses(), "HERD_TOKEN_FILE=" + token_file};
  return RunCommand(argv, timeout, env);
}

nlohmann::json LocalCluster::HerdJson(std::vector<std::string> args) {
  args.push_back("-o");
  args.push_back("json");
  CommandResult result = Herd(args);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  try {
    return nlohmann::json::parse(result.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << result.out << " (" << e.what() << ")";
    return nlohmann::json::object();
  }
}

std::string LocalCluster::Submit(const std::string& yaml) {
  const std::string path = root_ + "/job-" + std::to_string(submitted_++) + ".yaml";
  std::ofstream(path) << yaml;
  nlohmann::json job = HerdJson({"submit", path});
  return job.value("id", "");
}

nlohmann::json LocalCluster::WaitForState(const std::string& job_id, const std::set<std::string>& states,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  nlohmann::json job;
  while (std::chrono::steady_clock::now() < deadline) {
    CommandResult result = Herd({"status", job_id, "-o", "json"});
    if (result.exit_code == 0) {
      job = nlohmann::json::parse(result.out, nullptr, false);
      if (!job.is_discarded() && states.count(job.value("state", ""))) return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ADD_FAILURE() << "job " << job_id << " did not reach the expected state; last: " << job.dump();
  return job;
}

bool LocalCluster::WaitForAliveWorkers(int count, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    CommandResult result = Herd({"workers", "-o", "json"});
    if (result.exit_code == 0) {
      auto parsed = nlohmann::json::parse(result.out, nullptr, false);
      int alive = 0;
      if (!parsed.is_discarded()) {
        for (const auto& w : parsed.value("workers", nlohmann::json::array())) {
          const std::string state = w.value("state", "");
          if (state == "IDLE" || state == "BUSY") ++alive;
        }
      }
      if (alive >= count) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

std::string LocalCluster::Logs() const {
  std::string all;
  for (const auto& entry : fs::recursive_directory_iterator(root_)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.size() > 4 && name.substr(name.size() - 4) == ".log") {
      all += "==== " + entry.path().string() + "\n" + ReadFile(entry.path().string());
    }
  }
  return all;
}

}  // namespace herd::testing
