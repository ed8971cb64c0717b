// The data plane admits members only, through real worker and
// trainer processes: while a 2-worker job forms its generation and trains,
// a thread finds each trainer's listening TCP ports as soon as they appear
// (/proc) and connects to them with idle, random-bytes, truncated and
// replayed handshakes, and keeps looking (and connecting) while it trains. The job must not notice: it succeeds in its first
// generation (no re-form, restart_budget 0 unspent), the refusals are
// audited (trainer log, herd_data_plane_refused_connections_total), and the
// final parameters are bitwise those of an undisturbed run.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tests/harness/final_model.h"
#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/tcp_mesh_handshake.h"
#include "worker/comm/tcp_mesh_lanes.h"
#include "worker/contract/trainer_contract.h"
#include "worker/train/report/metrics_snapshot.h"

namespace herd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

std::string Job() {
  return "model: mlp\n"
         "dataset: {kind: idx, path: " + std::string(kFashionMnist) + "}\n"
         "batch_size: 16\n"
         "max_steps: 30\n"
         "optimizer: {name: sgd, lr: 0.05}\n"
         "seed: 42\n"
         "restart_budget: 0\n"  // a single re-form would fail the job
         "min_workers: 2\nmax_workers: 2\n";
}

// TCP ports `pid` listens on: its socket inodes (/proc/PID/fd) that
// /proc/PID/net/tcp{,6} lists in state LISTEN (0A).
std::set<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* dir = opendir(fd_dir.c_str())) {
    while (dirent* entry = readdir(dir)) {
      char target[128];
      const ssize_t n = readlink((fd_dir + "/" + entry->d_name).c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (std::strncmp(target, "socket:[", 8) == 0) inodes.insert(std::string(target + 8, n - 9));
    }
    closedir(dir);
  }
  std::set<int> ports;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  timeval bound{10, 0};  // no read below waits longer than the listener's handshake deadline and then some
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
  return fd;
}

std::string ReadExactly(int fd, size_t bytes) {
  std::string out(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = recv(fd, out.data() + got, bytes - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

// Waits until the listener closes `fd` (EOF or reset), then closes it too.
void AwaitRefusal(int fd) {
  char sink[4096];
  while (recv(fd, sink, sizeof(sink), 0) > 0) {
  }
  close(fd);
}

// A response to `challenge` under a key nobody in the job holds.
std::string WrongKeyResponse(const std::string& challenge) {
  HandshakeParams params;
  params.key = *NewMemberKey();
  params.world_size = 2;
  for (int i = 0; i < 8; ++i) {  // generation: big-endian after the header
    params.generation = (params.generation << 8) | static_cast<uint8_t>(challenge[kHandshakeHeaderBytes + i]);
  }
  AnsweredChallenge answered;
  AnswerChallenge(params, 1, 0, *NewHandshakeNonce(), challenge, &answered);
  return answered.response;
}

struct Attacks {
  int connected = 0;    // connections that reached a listening trainer port
  int idle_fd = -1;     // left open: the listener drops it at its deadline or when it closes
};

// One of each kind of outsider connection to `port`; returns once the
// listener has closed all but the idle one.
Attacks Attack(int port) {
  Attacks attacks;
  std::mt19937 random(port);
  attacks.idle_fd = Connect(port);
  if (attacks.idle_fd >= 0) ++attacks.connected;
  std::vector<int> pending;
  // 1 MiB of random bytes.
  if (int fd = Connect(port); fd >= 0) {
    ++attacks.connected;
    std::string junk(1 << 20, '\0');
    for (char& c : junk) c = static_cast<char>(random());
    send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    pending.push_back(fd);
  }
  // A well-formed response under the wrong key, then the same bytes
  // replayed on a second connection, then half a response (truncated).
  std::string recorded;
  for (int kind = 0; kind < 3; ++kind) {
    const int fd = Connect(port);
    if (fd < 0) continue;
    ++attacks.connected;
    const std::string challenge = ReadExactly(fd, kChallengeBytes);
    if (challenge.size() == kChallengeBytes) {
      if (kind == 0) recorded = WrongKeyResponse(challenge);
      const std::string frame = kind == 2 ? recorded.substr(0, recorded.size() / 2) : recorded;
      send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
      if (kind == 2) shutdown(fd, SHUT_WR);
    }
    pending.push_back(fd);
  }
  for (int fd : pending) AwaitRefusal(fd);
  return attacks;
}

// The flood: holds the trainers so that exactly one runs until it opens a
// data-plane port (the generation's rendezvous), attacks that port while
// its peer is held, lets everyone go, and from then on keeps scanning the
// trainers' listening ports (attacking any new one) until the job ends.
class Flood {
 public:
  Flood(LocalCluster& cluster, std::string job_id)
      : cluster_(cluster), job_id_(std::move(job_id)), thread_([this] { Run(); }) {}
  ~Flood() {
    stop_ = true;
    thread_.join();
    for (pid_t pid : pids_) kill(pid, SIGCONT);  // never leave a trainer stopped
  }
  int rendezvous_connections() const { return rendezvous_connections_; }
  int rendezvous_worker() const { return rendezvous_worker_; }
  int64_t step_scans() const { return step_scans_; }
  int64_t step_connections() const { return step_connections_; }
  int later_ports() const { return later_ports_; }
  std::string error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  void Fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = what;
  }

  void Run() {
    const auto deadline = Clock::now() + seconds(120);
    // Each trainer is stopped as soon as it exists: long before it can
    // load LibTorch, join and reach its rendezvous.
    pids_.assign(2, 0);
    while (!stop_ && (pids_[0] == 0 || pids_[1] == 0)) {
      if (Clock::now() > deadline) return Fail("the trainers did not start");
      for (int i = 0; i < 2; ++i) {
        if (pids_[i] != 0) continue;
        std::vector<pid_t> found = TrainerPidsOf(i);
        if (found.empty()) continue;
        pids_[i] = found.front();
        kill(pids_[i], SIGSTOP);
      }
    }
    // One runs at a time. Only rank 0 listens in a 2-rank job, and it
    // waits for rank 1 with its ports open (one per lane of the TCP mesh,
    // opened at once); the rank-1 trainer only waits (for rank 0's key),
    // so after a while without a port the other runs.
    int running = 0;
    kill(pids_[running], SIGCONT);
    auto slice_end = Clock::now() + seconds(2);
    std::set<int> ports;
    while (!stop_ && ports.size() < static_cast<size_t>(kDefaultTcpMeshLanes)) {
      if (Clock::now() > deadline) {
        return Fail(absl::StrCat("no trainer opened its ", kDefaultTcpMeshLanes, " data-plane ports (one had ",
                                 ports.size(), ")"));
      }
      ports = ListeningPorts(pids_[running]);
      if (!ports.empty()) continue;  // its lanes' listeners are opening
      if (Clock::now() > slice_end) {
        kill(pids_[running], SIGSTOP);
        running = 1 - running;
        kill(pids_[running], SIGCONT);
        slice_end = Clock::now() + seconds(2);
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    rendezvous_worker_ = running;
    std::vector<int> idle;
    for (int port : ports) {
      Attacks attacks = Attack(port);
      rendezvous_connections_ += attacks.connected;
      if (attacks.idle_fd >= 0) idle.push_back(attacks.idle_fd);
    }
    kill(pids_[1 - running], SIGCONT);
    // From then on (the rest of the rendezvous, the steps): every port a
    // trainer listens on is hit again and again, a new one attacked in
    // full. Only ports our trainers hold: a closed port may be reused by
    // another process on this machine, which must not get our junk.
    std::set<int> attacked = ports;
    while (!stop_) {
      ++step_scans_;
      for (pid_t pid : pids_) {
        for (int port : ListeningPorts(pid)) {
          if (attacked.insert(port).second) {
            ++later_ports_;
            Attack(port);
          } else if (int fd = Connect(port); fd >= 0) {
            ++step_connections_;
            send(fd, "junk", 4, MSG_NOSIGNAL);
            close(fd);
          }
        }
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    for (int fd : idle) close(fd);
  }

  // This job's trainer on worker `index` (an earlier job's may still be exiting).
  std::vector<pid_t> TrainerPidsOf(int index) {
    CommandResult found = RunCommand(
        {"/usr/bin/pgrep", "-f", "herd-trainer .*--job=" + job_id_ + " .*--work-dir=" + cluster_.worker_dir(index) + "/"},
        seconds(10));
    std::vector<pid_t> pids;
    std::istringstream lines(found.out);
    for (pid_t pid; lines >> pid;) pids.push_back(pid);
    return pids;
  }

  LocalCluster& cluster_;
  const std::string job_id_;
  std::atomic<bool> stop_{false};
  std::vector<pid_t> pids_;
  std::atomic<int> rendezvous_connections_{0};
  std::atomic<int> rendezvous_worker_{-1};
  std::atomic<int64_t> step_scans_{0};        // scans of the trainers' ports after the rendezvous attack
  std::atomic<int64_t> step_connections_{0};  // junk connections made in them
  std::atomic<int> later_ports_{0};           // ports first seen after the rendezvous attack
  mutable std::mutex mu_;
  std::string error_;
  std::thread thread_;  // last: starts after every member above exists
};

// herd_data_plane_refused_connections_total by reason, from the trainer's
// final metrics snapshot in its job dir.
std::map<std::string, double> RefusedByReason(const std::string& job_dir) {
  std::map<std::string, double> counts;
  auto families = ReadMetricsSnapshot(MetricsSnapshotPath(job_dir));
  if (!families.ok()) return counts;
  for (const auto& family : *families) {
    if (family.name != "herd_data_plane_refused_connections_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "reason") counts[label.value] += metric.counter.value;
      }
    }
  }
  return counts;
}

TEST(DataPlaneFlood, OutsideConnectionsNeverDisturbTheJob) {
  if (!std::filesystem::exists(kFashionMnist)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  LocalCluster cluster;

  const std::string quiet = cluster.Submit(Job());
  auto job = cluster.WaitForState(quiet, {"SUCCEEDED", "FAILED"}, seconds(120));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();

  std::string flooded;
  std::string flood_error;
  int rendezvous_connections = 0, rendezvous_worker = -1;
  int64_t step_scans = 0, step_connections = 0;
  int later_ports = 0;
  {
    flooded = cluster.Submit(Job());
    Flood flood(cluster, flooded);  // the trainers start well after the submit returns
    job = cluster.WaitForState(flooded, {"SUCCEEDED", "FAILED"}, seconds(120));
    flood_error = flood.error();
    rendezvous_connections = flood.rendezvous_connections();
    rendezvous_worker = flood.rendezvous_worker();
    step_scans = flood.step_scans();
    step_connections = flood.step_connections();
    later_ports = flood.later_ports();
  }
  ASSERT_EQ(flood_error, "") << cluster.Logs();
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), 30);
  EXPECT_EQ(Field(job, "generation"), 1) << "the flood made the job re-form";

  // Every kind of connection reached the rendezvous port and was refused,
  // audited in the log and counted in the metric.
  ASSERT_GE(rendezvous_worker, 0);
  EXPECT_EQ(rendezvous_connections, 5 * kDefaultTcpMeshLanes);  // five attacks on each lane's port
  const std::string job_dir = cluster.job_dir(rendezvous_worker, flooded);
  const std::string log = ReadFile(job_dir + "/trainer.log");
  for (const char* reason : {"(bad_magic)", "(bad_mac)", "(truncated)"}) {
    EXPECT_NE(log.find(std::string("audit: data-plane connection from 127.0.0.1:")), std::string::npos) << log;
    EXPECT_NE(log.find(reason), std::string::npos) << reason << "\n" << log;
  }
  EXPECT_NE(log.find("; generation 1, rank 0"), std::string::npos) << log;
  const std::map<std::string, double> refused = RefusedByReason(job_dir);
  EXPECT_GE(refused.count("bad_mac") ? refused.at("bad_mac") : 0, 2);  // the wrong key and its replay
  EXPECT_GE(refused.count("bad_magic") ? refused.at("bad_magic") : 0, 1);
  EXPECT_GE(refused.count("truncated") ? refused.at("truncated") : 0, 1);
  // The flood went on through the steps, and found no other port: one
  // generation, one listener, closed once its mesh formed; while training
  // the trainers listen on nothing an outsider could reach.
  EXPECT_GT(step_scans, 10);
  EXPECT_EQ(later_ports, 0);
  std::cerr << "flood: " << rendezvous_connections << " connections during the rendezvous, " << step_scans
            << " scans and " << step_connections << " more connections after it\n";

  // Bitwise the undisturbed run's parameters.
  auto undisturbed = LoadFinalModel(cluster.job_dir(0, quiet));
  for (int worker = 0; worker < 2; ++worker) {
    auto result = LoadFinalModel(cluster.job_dir(worker, flooded));
    ASSERT_FALSE(result.empty());
    EXPECT_EQ(DifferingTensors(result, undisturbed), std::vector<std::string>{}) << "worker " << worker;
  }
}

}  // namespace
}  // namespace herd::testing
