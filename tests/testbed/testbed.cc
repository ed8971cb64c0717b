#include "tests/testbed/testbed.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/harness/process.h"

namespace herd::testbed {
namespace {

namespace fs = std::filesystem;
using herd::testing::CommandResult;
using herd::testing::RunCommand;

// 198.18.0.0/15 holds 512 /24s: testbed i uses 198.(18 + i / 256).(i % 256).0/24.
constexpr int kSubnets = 512;
constexpr int kMaxHosts = 100;
constexpr int kMaxSites = 20;
constexpr char kNftTable[] = "herd_testbed";
constexpr char kNetnsDir[] = "/run/netns";
constexpr auto kLinkUpTimeout = std::chrono::seconds(10);
constexpr auto kRelayTimeout = std::chrono::seconds(10);
constexpr int kMaxDelayMs = 10000;
// A relayed link's devices inside its relay namespace.
constexpr char kRelayHostSide[] = "tohost";
constexpr char kRelayBridgeSide[] = "tobridge";
// A relayed site uplink's devices inside its relay namespace.
constexpr char kRelaySiteSide[] = "tosite";
constexpr char kRelayCoreSide[] = "tocore";

std::string SubnetPrefix(int index) { return absl::StrCat("198.", 18 + index / 256, ".", index % 256, "."); }

// Index of the /24 holding `address` if it lies in 198.18.0.0/15, else -1.
int SubnetIndexOf(uint32_t address_host_order) {
  if ((address_host_order >> 17) != ((198u << 24 | 18u << 16) >> 17)) return -1;
  return static_cast<int>((address_host_order >> 8) & 0x1ff);
}

// Tools are in sbin, which Bazel's test PATH leaves out.
std::string FindTool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream in(path);
    for (std::string dir; std::getline(in, dir, ':');) {
      if (!dir.empty()) dirs.push_back(dir);
    }
  }
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/bin"}) dirs.push_back(dir);
  for (const auto& dir : dirs) {
    const std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// herd-testbed-relay: $HERD_TESTBED_RELAY, next to this executable (the
// CLI in bazel-bin), or in this executable's or a test's runfiles.
absl::StatusOr<std::string> FindRelay() {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("HERD_TESTBED_RELAY"); path != nullptr && *path) return std::string(path);
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  const std::string relative = "herd/tests/testbed/herd-testbed-relay";
  if (!error) {
    candidates.push_back((self.parent_path() / "herd-testbed-relay").string());
    candidates.push_back(self.string() + ".runfiles/" + relative);
  }
  for (const char* variable : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(variable); dir != nullptr && *dir) candidates.push_back(std::string(dir) + "/" + relative);
  }
  for (const auto& candidate : candidates) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("testbed: herd-testbed-relay not found (looked in ",
                                          absl::StrJoin(candidates, ", "),
                                          "): build //tests/testbed:herd-testbed-relay and set HERD_TESTBED_RELAY, "
                                          "or add it to the test's data"));
}

struct Tools {
  std::string ip, tc, nft;
};

absl::StatusOr<Tools> FindTools() {
  Tools tools{FindTool("ip"), FindTool("tc"), FindTool("nft")};
  if (tools.ip.empty() || tools.tc.empty()) {
    return absl::FailedPreconditionError("testbed: `ip` and `tc` not found: install iproute2");
  }
  if (tools.nft.empty()) {
    return absl::FailedPreconditionError("testbed: `nft` not found: install nftables (scripts/setup.sh does)");
  }
  return tools;
}

const Tools& GetTools() {
  static const Tools tools = [] {
    auto found = FindTools();
    return found.ok() ? *found : Tools{"ip", "tc", "nft"};
  }();
  return tools;
}

// Whether this process holds CAP_NET_ADMIN and CAP_SYS_ADMIN (namespaces,
// links, the /run/netns mounts).
bool HasNetworkCapabilities() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    constexpr uint64_t kNeeded = (uint64_t{1} << 12) | (uint64_t{1} << 21);  // CAP_NET_ADMIN, CAP_SYS_ADMIN
    return (caps & kNeeded) == kNeeded;
  }
  return false;
}

std::string RootHint() {
  return HasNetworkCapabilities() ? ""
                                  : " (testbeds need root with CAP_NET_ADMIN and CAP_SYS_ADMIN, which this "
                                    "process lacks; CI runs as root)";
}

absl::Status Run(const std::vector<std::string>& argv) {
  CommandResult result = RunCommand(argv, std::chrono::seconds(30));
  if (result.exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("testbed: `", absl::StrJoin(argv, " "), "` failed (exit ",
                                          result.exit_code, "): ", absl::StripAsciiWhitespace(result.err),
                                          RootHint()));
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string RandomToken() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(static_cast<uint64_t>(rd()) << 32 | rd(), absl::kZeroPad16));
}

// Field 22 of /proc/PID/stat (clock ticks after boot); 0 if the process is gone.
uint64_t ProcessStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::stringstream fields(stat.substr(paren + 2));  // from field 3 on
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) {
      uint64_t value = 0;
      return absl::SimpleAtoi(field, &value) ? value : 0;
    }
  }
  return 0;
}

std::string PidNamespace() {
  std::error_code error;
  return fs::read_symlink("/proc/self/ns/pid", error).string();
}

// The testbed a kernel object belongs to: "htb137" for "htb137v2", "" for
// names not made by a testbed.
std::string TestbedOf(const std::string& object) {
  const size_t prefix = std::strlen(kNamePrefix);
  if (object.compare(0, prefix, kNamePrefix) != 0) return "";
  size_t end = prefix;
  while (end < object.size() && std::isdigit(static_cast<unsigned char>(object[end]))) ++end;
  if (end == prefix || end == object.size()) return "";
  const std::string suffix = object.substr(end);
  // br: the core bridge; h, v, d: a host's namespace, link and relay
  // namespace; s, u, w, x: a site's bridge, uplink ends and relay namespace.
  if (suffix != "br" && !(suffix.size() > 1 && std::strchr("vhdsuwx", suffix[0]) != nullptr)) return "";
  return object.substr(0, end);
}

int IndexOf(const std::string& testbed_name) {
  int index = -1;
  if (!absl::SimpleAtoi(testbed_name.substr(std::strlen(kNamePrefix)), &index)) return -1;
  return index;
}

std::vector<std::string> NetnsNames() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(kNetnsDir, error)) names.push_back(entry.path().filename());
  return names;
}

std::vector<std::string> LinkNames() {
  std::vector<std::string> names;
  if (struct if_nameindex* links = if_nameindex(); links != nullptr) {
    for (auto* link = links; link->if_index != 0; ++link) names.push_back(link->if_name);
    if_freenameindex(links);
  }
  return names;
}

bool LinkExists(const std::string& name) { return if_nametoindex(name.c_str()) != 0; }

// Names of the bridge-family nftables tables of the root namespace (cuts
// between sites are in tables named like their testbed).
std::vector<std::string> CutTableNames() {
  std::vector<std::string> names;
  CommandResult listed = RunCommand({GetTools().nft, "list", "tables", "bridge"}, std::chrono::seconds(30));
  std::istringstream lines(listed.out);
  for (std::string word, family, name; lines >> word >> family >> name;) {
    if (word == "table" && family == "bridge") names.push_back(name);
  }
  return names;
}

bool CutTableExists(const std::string& testbed) {
  const std::vector<std::string> names = CutTableNames();
  return std::find(names.begin(), names.end(), testbed) != names.end();
}

// IFF_UP and IFF_RUNNING (carrier) of `name`, read with a socket of the
// calling thread's network namespace.
bool LinkRunning(const std::string& name) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq request{};
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  const bool running = ioctl(fd, SIOCGIFFLAGS, &request) == 0 && (request.ifr_flags & IFF_UP) &&
                       (request.ifr_flags & IFF_RUNNING);
  close(fd);
  return running;
}

// Runs `fn` on a thread that has entered network namespace `netns`.
absl::Status RunInNetns(const std::string& netns, const std::function<void()>& fn) {
  const std::string path = std::string(kNetnsDir) + "/" + netns;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("testbed: open ", path, ": ", std::strerror(errno)));
  absl::Status status;
  std::thread thread([&] {
    if (setns(fd, CLONE_NEWNET) != 0) {
      status = absl::InternalError(absl::StrCat("testbed: setns ", path, ": ", std::strerror(errno), RootHint()));
      return;
    }
    fn();
  });
  thread.join();
  close(fd);
  return status;
}

// The state folder's lock: held while picking a /24 and while sweeping.
class StateLock {
 public:
  StateLock() {
    fd_ = open((std::string(kStateDir) + "/.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~StateLock() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

absl::Status EnsureStateDir() {
  std::error_code error;
  fs::create_directories(kStateDir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("testbed: cannot create the state folder ", kStateDir, ": ", error.message(), RootHint()));
  }
  return absl::OkStatus();
}

absl::Status LockFailed() {
  return absl::FailedPreconditionError(
      absl::StrCat("testbed: cannot lock ", kStateDir, "/.lock: ", std::strerror(errno), RootHint()));
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << content;
    if (!out.flush()) return absl::InternalError(absl::StrCat("testbed: cannot write ", temp));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("testbed: cannot rename ", temp, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Starts `/bin/sh -c script` in its own session with stdio on /dev/null
// (stdin: `stdin_fd` if >= 0) and no other inherited descriptors. The child
// only makes async-signal-safe calls before exec, as a threaded parent needs.
pid_t SpawnDetachedShell(const std::string& script, int stdin_fd) {
  const char* argv[] = {"sh", "-c", script.c_str(), nullptr};
  pid_t pid = fork();
  if (pid != 0) return pid;
  setsid();
  int null_fd = open("/dev/null", O_RDWR);
  dup2(stdin_fd >= 0 ? stdin_fd : null_fd, STDIN_FILENO);
  dup2(null_fd, STDOUT_FILENO);
  dup2(null_fd, STDERR_FILENO);
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv("/bin/sh", const_cast<char* const*>(argv));
  _exit(127);
}

struct Record {
  nlohmann::json json;
  std::string path;
};

std::vector<Record> ReadRecords() {
  std::vector<Record> records;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(kStateDir, error)) {
    const std::string file = entry.path().filename();
    if (!absl::EndsWith(file, ".json") || file[0] == '.') continue;
    auto json = nlohmann::json::parse(ReadWholeFile(entry.path()), nullptr, false);
    if (json.is_discarded() || !json.is_object() || !json.contains("name")) continue;
    records.push_back({json, entry.path()});
  }
  return records;
}

// Whether the process that owns a record is gone. Records from another PID
// namespace (a sandboxed run) cannot be judged and count as alive.
bool OwnerGone(const nlohmann::json& record) {
  if (record.value("pid_namespace", "") != PidNamespace()) return false;
  const pid_t pid = record.value("owner_pid", 0);
  const uint64_t start = record.value("owner_start", uint64_t{0});
  if (pid <= 0) return true;
  const uint64_t now = ProcessStartTime(pid);
  return now == 0 || (start != 0 && now != start);
}

// SweepStale() with the state folder's lock held.
absl::StatusOr<std::vector<std::string>> SweepStaleLocked();

}  // namespace

std::string Testbed::state_file() const { return std::string(kStateDir) + "/" + name_ + ".json"; }

std::string Testbed::Json() const {
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& h : hosts_) {
    hosts.push_back({{"index", h.index},
                     {"name", h.name},
                     {"site", h.site},
                     {"netns", h.netns},
                     {"veth", h.veth},
                     {"relay_netns", h.relay_netns},
                     {"address", h.address}});
  }
  nlohmann::json json = {{"name", name_},
                         {"subnet", subnet_},
                         {"bridge", bridge_},
                         {"root_address", root_address_},
                         {"owner_pid", owner_pid_},
                         {"owner_start", owner_start_},
                         {"pid_namespace", PidNamespace()},
                         {"token", token_},
                         {"hosts", hosts}};
  if (!sites_.empty()) {
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& site : sites_) {
      sites.push_back({{"index", site.index},
                       {"name", site.name},
                       {"bridge", site.bridge},
                       {"uplink", site.uplink},
                       {"core_port", site.core_port},
                       {"relay_netns", site.relay_netns},
                       {"hosts", site.hosts}});
    }
    json["sites"] = sites;
    json["site_rate"] = site_rate_;
    json["site_delay_ms"] = site_delay_ms_;
    json["wan_rate"] = wan_rate_;
    json["wan_delay_ms"] = wan_delay_ms_;
  }
  return json.dump(2);
}

std::string Testbed::TeardownScript() const {
  // Kill what runs inside the hosts, then delete links (both veth ends go),
  // namespaces and the bridge; the state file goes last, so a sweep never
  // mistakes a testbed in teardown for leftovers nobody owns.
  const std::string ip = ShellQuote(GetTools().ip);
  std::string script = "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n";
  for (const auto& h : hosts_) {
    for (const auto& netns : {h.netns, h.relay_netns}) {
      script += absl::StrCat("for p in $(", ip, " netns pids ", netns, " 2>/dev/null); do kill -9 $p; done\n");
    }
  }
  for (const auto& site : sites_) {
    script += absl::StrCat("for p in $(", ip, " netns pids ", site.relay_netns, " 2>/dev/null); do kill -9 $p; done\n");
  }
  for (const auto& h : hosts_) script += absl::StrCat(ip, " link del ", h.veth, " 2>/dev/null\n");
  for (const auto& site : sites_) {
    script += absl::StrCat(ip, " link del ", site.uplink, " 2>/dev/null\n", ip, " link del ", site.core_port,
                           " 2>/dev/null\n", ip, " netns del ", site.relay_netns, " 2>/dev/null\nrm -f ",
                           ShellQuote(site_relay_stats_file(site.index)), " ",
                           ShellQuote(site_relay_log_file(site.index)), "\n", ip, " link del ", site.bridge,
                           " 2>/dev/null\n");
  }
  for (const auto& h : hosts_) {
    script += absl::StrCat(ip, " netns del ", h.netns, " 2>/dev/null\n", ip, " netns del ", h.relay_netns,
                           " 2>/dev/null\nrm -f ", ShellQuote(relay_stats_file(h.index)), " ",
                           ShellQuote(relay_log_file(h.index)), "\n");
  }
  script += absl::StrCat(ip, " link del ", bridge_, " 2>/dev/null\n");
  // Cuts between sites (CutBetweenSites) live in the root namespace.
  script += absl::StrCat(ShellQuote(GetTools().nft), " delete table bridge ", name_, " 2>/dev/null\n");
  script += absl::StrCat("rm -f ", ShellQuote(state_file()), "\nexit 0\n");
  return script;
}

absl::Status Testbed::StartWatchdog() {
  // Runs the teardown once the owner is gone, unless the state file no
  // longer carries this run's token (torn down already, or a new testbed).
  const std::string mine = absl::StrCat("grep -qs ", token_, " ", ShellQuote(state_file()));
  if (owner_pid_ == getpid()) {
    // The pipe's write end lives (close-on-exec) only in this process: the
    // watchdog reads end-of-file when it exits, however it exits.
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("testbed: pipe: ", std::strerror(errno)));
    watchdog_pid_ = SpawnDetachedShell(absl::StrCat("read -r _\n", mine, " || exit 0\n", TeardownScript()), fds[0]);
    close(fds[0]);
    watchdog_fd_ = fds[1];
  } else {
    watchdog_pid_ = SpawnDetachedShell(absl::StrCat("while kill -0 ", owner_pid_, " 2>/dev/null && ", mine,
                                                    "; do sleep 1; done\n", mine, " || exit 0\n", TeardownScript()),
                                       -1);
  }
  if (watchdog_pid_ < 0) return absl::InternalError(absl::StrCat("testbed: fork: ", std::strerror(errno)));
  return absl::OkStatus();
}

namespace {

// Checks the options and fills in the host count.
absl::Status CheckOptions(TestbedOptions& options) {
  if (options.sites < 0 || options.sites > kMaxSites) {
    return absl::InvalidArgumentError(absl::StrCat("testbed: sites ", options.sites, " is not in 0..", kMaxSites));
  }
  if (options.sites == 0) {
    if (options.hosts == 0) options.hosts = 2;
    if (!options.site_rate.empty() || options.site_delay_ms != 0 || !options.wan_rate.empty() ||
        options.wan_delay_ms != 0) {
      return absl::InvalidArgumentError(
          "testbed: site_rate, site_delay_ms, wan_rate and wan_delay_ms need sites (set sites to 1 or more)");
    }
  } else {
    if (options.hosts_per_site < 1 || options.sites * options.hosts_per_site > kMaxHosts) {
      return absl::InvalidArgumentError(absl::StrCat("testbed: hosts_per_site ", options.hosts_per_site,
                                                     " with ", options.sites, " sites is not 1..",
                                                     kMaxHosts / options.sites, " (at most ", kMaxHosts,
                                                     " hosts in all)"));
    }
    const int hosts = options.sites * options.hosts_per_site;
    if (options.hosts != 0 && options.hosts != hosts) {
      return absl::InvalidArgumentError(absl::StrCat("testbed: hosts ", options.hosts,
                                                     " is not sites x hosts_per_site (", hosts,
                                                     "); leave hosts 0 with sites"));
    }
    options.hosts = hosts;
    if (options.delay_ms != 0) {
      return absl::InvalidArgumentError("testbed: delay_ms is for a testbed without sites; use site_delay_ms");
    }
    for (const auto& [what, ms] : {std::pair<const char*, int>{"site_delay_ms", options.site_delay_ms},
                                   {"wan_delay_ms", options.wan_delay_ms}}) {
      if (ms < 0 || ms > kMaxDelayMs) {
        return absl::InvalidArgumentError(absl::StrCat("testbed: ", what, " ", ms, " is not in 0..", kMaxDelayMs));
      }
    }
  }
  if (options.hosts < 1 || options.hosts > kMaxHosts) {
    return absl::InvalidArgumentError(absl::StrCat("testbed: hosts must be 1..", kMaxHosts));
  }
  if (options.delay_ms < 0 || options.delay_ms > kMaxDelayMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("testbed: delay_ms ", options.delay_ms, " is not in 0..", kMaxDelayMs));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Testbed>> Testbed::Create(TestbedOptions options) {
  if (auto s = CheckOptions(options); !s.ok()) return s;
  if (auto tools = FindTools(); !tools.ok()) return tools.status();
  if (auto s = EnsureStateDir(); !s.ok()) return s;
  std::unique_ptr<Testbed> bed(new Testbed());
  bed->owner_pid_ = options.owner_pid == 0 ? getpid() : options.owner_pid;
  bed->owner_start_ = ProcessStartTime(bed->owner_pid_);
  if (bed->owner_start_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat("testbed: owner process ", bed->owner_pid_, " does not exist"));
  }
  bed->token_ = RandomToken();
  {
    StateLock lock;
    if (!lock.ok()) return LockFailed();
    // Stale testbeds go first, so a killed run's /24 can be reused.
    auto swept = SweepStaleLocked();
    if (!swept.ok()) return swept.status();
    std::set<int> used;
    for (const auto& record : ReadRecords()) used.insert(IndexOf(record.json.value("name", "")));
    for (const auto& names : {NetnsNames(), LinkNames()}) {
      for (const auto& object : names) {
        if (std::string owner = TestbedOf(object); !owner.empty()) used.insert(IndexOf(owner));
      }
    }
    // Subnets some interface here already uses (not ours to take).
    if (ifaddrs* addresses = nullptr; getifaddrs(&addresses) == 0) {
      for (auto* a = addresses; a != nullptr; a = a->ifa_next) {
        if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
        used.insert(SubnetIndexOf(ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr)));
      }
      freeifaddrs(addresses);
    }
    std::vector<int> free;
    for (int i = 0; i < kSubnets; ++i) {
      if (used.count(i) == 0) free.push_back(i);
    }
    if (free.empty()) return absl::ResourceExhaustedError("testbed: every /24 of 198.18.0.0/15 is in use");
    std::random_device rd;
    const int index = free[std::uniform_int_distribution<size_t>(0, free.size() - 1)(rd)];

    bed->name_ = absl::StrCat(kNamePrefix, index);
    bed->bridge_ = bed->name_ + "br";
    bed->subnet_ = SubnetPrefix(index) + "0/24";
    bed->root_address_ = SubnetPrefix(index) + "1";
    for (int i = 0; i < options.hosts; ++i) {
      Host host{i, absl::StrCat(bed->name_, "h", i), absl::StrCat(bed->name_, "v", i),
                SubnetPrefix(index) + std::to_string(10 + i), absl::StrCat(bed->name_, "d", i)};
      host.name = absl::StrCat("h", i);
      if (options.sites > 0) {
        host.site = i / options.hosts_per_site;
        host.name = absl::StrCat("s", host.site, "h", i % options.hosts_per_site);
      }
      bed->hosts_.push_back(host);
    }
    for (int s = 0; s < options.sites; ++s) {
      Site site{s,
                absl::StrCat("s", s),
                absl::StrCat(bed->name_, "s", s),
                absl::StrCat(bed->name_, "u", s),
                absl::StrCat(bed->name_, "w", s),
                absl::StrCat(bed->name_, "x", s),
                {}};
      for (int j = 0; j < options.hosts_per_site; ++j) site.hosts.push_back(s * options.hosts_per_site + j);
      bed->sites_.push_back(site);
    }
    bed->site_rate_ = options.site_rate;
    bed->site_delay_ms_ = options.site_delay_ms;
    bed->wan_rate_ = options.wan_rate;
    bed->wan_delay_ms_ = options.wan_delay_ms;
    // The state file claims the name and the /24 before any object exists.
    if (auto s = WriteFileAtomically(bed->state_file(), bed->Json()); !s.ok()) return s;
  }
  bed->owned_ = bed->owner_pid_ == getpid();
  if (options.watchdog) {
    if (auto s = bed->StartWatchdog(); !s.ok()) {
      std::remove(bed->state_file().c_str());
      return s;
    }
  }
  absl::Status created = bed->CreateObjects();
  for (int i = 0; created.ok() && options.delay_ms > 0 && i < options.hosts; ++i) {
    created = bed->SetDelay(i, options.delay_ms);
  }
  // Inside a site: each host's link holds half the one-way delay between two
  // of its hosts (in microseconds, so an odd ms count splits exactly).
  for (int i = 0; created.ok() && options.site_delay_ms > 0 && i < options.hosts; ++i) {
    created = bed->SetDelayUs(i, int64_t{options.site_delay_ms} * 500);
  }
  for (int i = 0; created.ok() && !options.site_rate.empty() && i < options.hosts; ++i) {
    created = bed->Shape(i, ShapeOptions{options.site_rate});
  }
  if (!created.ok()) {
    (void)bed->Down();
    return created;
  }
  return bed;
}

absl::Status Testbed::CreateObjects() {
  const Tools& t = GetTools();
  const std::vector<std::vector<std::string>> bridge = {
      {t.ip, "link", "add", bridge_, "type", "bridge"},
      {t.ip, "addr", "add", root_address_ + "/24", "dev", bridge_},
      {t.ip, "link", "set", bridge_, "up"},
  };
  for (const auto& argv : bridge) {
    if (auto s = Run(argv); !s.ok()) return s;
  }
  for (const auto& site : sites_) {
    if (auto s = CreateSite(site); !s.ok()) return s;
  }
  for (const auto& h : hosts_) {
    const std::vector<std::vector<std::string>> host = {
        {t.ip, "netns", "add", h.netns},
        {t.ip, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns},
        {t.ip, "link", "set", h.veth, "master", BridgeOf(h.index), "up"},
        {t.ip, "-n", h.netns, "addr", "add", h.address + "/24", "dev", "eth0"},
        {t.ip, "-n", h.netns, "link", "set", "eth0", "up"},
        {t.ip, "-n", h.netns, "link", "set", "lo", "up"},
    };
    for (const auto& argv : host) {
      if (auto s = Run(argv); !s.ok()) return s;
    }
  }
  for (const auto& site : sites_) {
    if (auto s = WaitForSiteLinks(site.index); !s.ok()) return s;
  }
  std::vector<int> all;
  for (const auto& h : hosts_) all.push_back(h.index);
  return WaitForLinks(all);
}

absl::Status Testbed::WaitForLinks(const std::vector<int>& hosts) const {
  const auto deadline = std::chrono::steady_clock::now() + kLinkUpTimeout;
  for (int index : hosts) {
    const Host& h = hosts_.at(index);
    while (true) {
      bool inside = false;
      if (auto s = RunInHost(index, [&] { inside = LinkRunning("eth0"); }); !s.ok()) return s;
      if (inside && LinkRunning(h.veth) && LinkRunning(BridgeOf(index))) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("testbed: link of host ", index, " (", h.veth,
                                                        ") not up after ", kLinkUpTimeout.count(), " s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Testbed>> Testbed::Open(const std::string& name) {
  const std::string path = std::string(kStateDir) + "/" + name + ".json";
  auto json = nlohmann::json::parse(ReadWholeFile(path), nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::NotFoundError(absl::StrCat("testbed: no testbed ", name, " (no readable ", path, ")"));
  }
  std::unique_ptr<Testbed> bed(new Testbed());
  try {
    bed->name_ = json.at("name").get<std::string>();
    bed->bridge_ = json.at("bridge").get<std::string>();
    bed->subnet_ = json.at("subnet").get<std::string>();
    bed->root_address_ = json.at("root_address").get<std::string>();
    bed->owner_pid_ = json.at("owner_pid").get<pid_t>();
    bed->owner_start_ = json.value("owner_start", uint64_t{0});
    bed->token_ = json.value("token", "");
    for (const auto& h : json.at("hosts")) {
      const int index = h.at("index").get<int>();
      bed->hosts_.push_back(Host{index, h.at("netns").get<std::string>(), h.at("veth").get<std::string>(),
                                 h.at("address").get<std::string>(),
                                 h.value("relay_netns", absl::StrCat(bed->name_, "d", index)), h.value("site", -1),
                                 h.value("name", absl::StrCat("h", index))});
    }
    for (const auto& site : json.value("sites", nlohmann::json::array())) {
      bed->sites_.push_back(Site{site.at("index").get<int>(), site.at("name").get<std::string>(),
                                 site.at("bridge").get<std::string>(), site.at("uplink").get<std::string>(),
                                 site.at("core_port").get<std::string>(), site.at("relay_netns").get<std::string>(),
                                 site.at("hosts").get<std::vector<int>>()});
    }
    bed->site_rate_ = json.value("site_rate", "");
    bed->site_delay_ms_ = json.value("site_delay_ms", 0);
    bed->wan_rate_ = json.value("wan_rate", "");
    bed->wan_delay_ms_ = json.value("wan_delay_ms", 0);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("testbed: ", path, ": ", e.what()));
  }
  return bed;
}

Testbed::~Testbed() {
  if (owned_ && !down_) {
    if (absl::Status s = Down(); !s.ok()) fprintf(stderr, "%s\n", std::string(s.message()).c_str());
  }
  if (watchdog_fd_ >= 0) close(watchdog_fd_);
  if (watchdog_pid_ > 0 && owner_pid_ == getpid()) waitpid(watchdog_pid_, nullptr, 0);
}

absl::Status Testbed::Down() {
  CommandResult result = RunCommand({"/bin/sh", "-c", TeardownScript()}, std::chrono::seconds(60));
  down_ = true;
  // The in-process watchdog wakes up, finds the state file gone and exits.
  if (watchdog_fd_ >= 0) {
    close(watchdog_fd_);
    watchdog_fd_ = -1;
    if (watchdog_pid_ > 0) waitpid(watchdog_pid_, nullptr, 0);
    watchdog_pid_ = -1;
  }
  std::vector<std::string> left;
  for (const auto& h : hosts_) {
    if (fs::exists(std::string(kNetnsDir) + "/" + h.netns)) left.push_back("namespace " + h.netns);
    if (fs::exists(std::string(kNetnsDir) + "/" + h.relay_netns)) left.push_back("namespace " + h.relay_netns);
    if (LinkExists(h.veth)) left.push_back("link " + h.veth);
  }
  for (const auto& site : sites_) {
    if (fs::exists(std::string(kNetnsDir) + "/" + site.relay_netns)) left.push_back("namespace " + site.relay_netns);
    for (const auto& link : {site.uplink, site.core_port, site.bridge}) {
      if (LinkExists(link)) left.push_back("link " + link);
    }
  }
  if (LinkExists(bridge_)) left.push_back("bridge " + bridge_);
  if (CutTableExists(name_)) left.push_back("nftables table bridge " + name_);
  if (fs::exists(state_file())) left.push_back("state file " + state_file());
  if (!left.empty()) {
    return absl::InternalError(absl::StrCat("testbed ", name_, ": teardown left ", absl::StrJoin(left, ", "), " (",
                                            absl::StripAsciiWhitespace(result.err), ")", RootHint()));
  }
  return absl::OkStatus();
}

absl::Status Testbed::CheckHost(int host) const {
  if (host < 0 || host >= static_cast<int>(hosts_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("testbed ", name_, ": no host ", host, " (it has ", hosts_.size(), ")"));
  }
  return absl::OkStatus();
}

std::vector<std::string> Testbed::ExecPrefix(int host) const {
  return {GetTools().ip, "netns", "exec", hosts_.at(host).netns};
}

absl::Status Testbed::RunInHost(int host, const std::function<void()>& fn) const {
  if (auto s = CheckHost(host); !s.ok()) return s;
  return RunInNetns(hosts_[host].netns, fn);
}

absl::Status Testbed::Shape(int host, const ShapeOptions& options) {
  if (auto s = CheckHost(host); !s.ok()) return s;
  if (options.rate.empty()) return absl::InvalidArgumentError("testbed: shape needs a rate (e.g. 100mbit)");
  const Tools& t = GetTools();
  const std::vector<std::string> tbf = {"root",  "tbf",         "rate",    options.rate,
                                        "burst", options.burst, "latency", options.latency};
  std::vector<std::string> to_host = {t.tc, "qdisc", "replace", "dev", hosts_[host].veth};
  std::vector<std::string> from_host = {t.tc, "-n", hosts_[host].netns, "qdisc", "replace", "dev", "eth0"};
  to_host.insert(to_host.end(), tbf.begin(), tbf.end());
  from_host.insert(from_host.end(), tbf.begin(), tbf.end());
  if (auto s = Run(to_host); !s.ok()) return s;
  return Run(from_host);
}

absl::Status Testbed::Unshape(int host) {
  if (auto s = CheckHost(host); !s.ok()) return s;
  const Tools& t = GetTools();
  for (std::vector<std::string> prefix : {std::vector<std::string>{t.tc}, {t.tc, "-n", hosts_[host].netns}}) {
    const std::string dev = prefix.size() == 1 ? hosts_[host].veth : "eth0";
    std::vector<std::string> show = prefix;
    show.insert(show.end(), {"qdisc", "show", "dev", dev, "root"});
    CommandResult shown = RunCommand(show, std::chrono::seconds(30));
    if (shown.out.find("tbf") == std::string::npos) continue;
    prefix.insert(prefix.end(), {"qdisc", "del", "dev", dev, "root"});
    if (auto s = Run(prefix); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Testbed::SetLoss(int host, double percent) {
  if (auto s = CheckHost(host); !s.ok()) return s;
  if (!(percent >= 0 && percent <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat("testbed: loss ", percent, "% is not in 0..100"));
  }
  // One nft transaction: create-then-delete clears any previous rules, then
  // a counted random drop on eth0 in each direction (in basis points).
  const std::string table = absl::StrCat("inet ", kNftTable);
  std::string rules = absl::StrCat("add table ", table, "; delete table ", table);
  const long basis_points = std::lround(percent * 100);
  if (basis_points > 0) {
    for (const auto& [chain, hook, match] : {std::tuple<const char*, const char*, const char*>{"egress", "output", "oifname"},
                                             {"ingress", "input", "iifname"}}) {
      absl::StrAppend(&rules, "; add table ", table, "; add chain ", table, " ", chain, " { type filter hook ", hook,
                      " priority 0; policy accept; }; add rule ", table, " ", chain, " ", match,
                      " \"eth0\" numgen random mod 10000 < ", basis_points, " counter drop");
    }
  }
  std::vector<std::string> argv = ExecPrefix(host);
  argv.insert(argv.end(), {GetTools().nft, rules});
  return Run(argv);
}

absl::StatusOr<uint64_t> Testbed::DroppedPackets(int host) const {
  if (auto s = CheckHost(host); !s.ok()) return s;
  std::vector<std::string> argv = ExecPrefix(host);
  argv.insert(argv.end(), {GetTools().nft, "-j", "list", "table", "inet", kNftTable});
  CommandResult result = RunCommand(argv, std::chrono::seconds(30));
  if (result.exit_code != 0) {
    if (result.err.find("No such file or directory") != std::string::npos) return 0;  // no loss rules
    return absl::InternalError(absl::StrCat("testbed: `", absl::StrJoin(argv, " "), "` failed: ", result.err));
  }
  auto json = nlohmann::json::parse(result.out, nullptr, false);
  if (json.is_discarded()) return absl::InternalError("testbed: nft printed no JSON: " + result.out);
  uint64_t dropped = 0;
  for (const auto& item : json.value("nftables", nlohmann::json::array())) {
    if (!item.contains("rule")) continue;
    for (const auto& expr : item["rule"].value("expr", nlohmann::json::array())) {
      if (expr.contains("counter")) dropped += expr["counter"].value("packets", uint64_t{0});
    }
  }
  return dropped;
}

absl::Status Testbed::Cut(int host) {
  if (auto s = CheckHost(host); !s.ok()) return s;
  // A relayed host's own peer is the relay's `tohost`: down too, so the host
  // still sees no carrier.
  if (Relayed(host)) {
    if (auto s = Run({GetTools().ip, "-n", hosts_[host].relay_netns, "link", "set", kRelayHostSide, "down"});
        !s.ok()) {
      return s;
    }
  }
  return Run({GetTools().ip, "link", "set", hosts_[host].veth, "down"});
}

absl::Status Testbed::Restore(int host) {
  if (auto s = CheckHost(host); !s.ok()) return s;
  if (auto s = Run({GetTools().ip, "link", "set", hosts_[host].veth, "up"}); !s.ok()) return s;
  if (Relayed(host)) {
    if (auto s = Run({GetTools().ip, "-n", hosts_[host].relay_netns, "link", "set", kRelayHostSide, "up"}); !s.ok()) {
      return s;
    }
  }
  return WaitForLinks({host});
}

bool Testbed::Relayed(int host) const {
  return fs::exists(std::string(kNetnsDir) + "/" + hosts_.at(host).relay_netns);
}

std::string Testbed::relay_stats_file(int host) const {
  return absl::StrCat(kStateDir, "/", name_, "-h", host, ".relay");
}

std::string Testbed::relay_log_file(int host) const {
  return absl::StrCat(kStateDir, "/", name_, "-h", host, ".relay.log");
}

std::string Testbed::site_relay_stats_file(int site) const {
  return absl::StrCat(kStateDir, "/", name_, "-s", site, ".relay");
}

std::string Testbed::site_relay_log_file(int site) const {
  return absl::StrCat(kStateDir, "/", name_, "-s", site, ".relay.log");
}

namespace {

// Kills the relay in `netns` (the only process there).
absl::Status StopRelayIn(const std::string& netns) {
  const auto deadline = std::chrono::steady_clock::now() + kRelayTimeout;
  while (true) {
    CommandResult pids = RunCommand({GetTools().ip, "netns", "pids", netns}, std::chrono::seconds(30));
    std::stringstream in(pids.out);
    bool any = false;
    for (pid_t pid; in >> pid;) {
      kill(pid, SIGKILL);
      any = true;
    }
    if (!any) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("testbed: the relay in ", netns, " did not exit"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Starts a relay in `netns` between `host_side` and `bridge_side` and
// returns once it runs (its stats file exists).
absl::Status StartRelayIn(const std::string& netns, const std::string& host_side, const std::string& bridge_side,
                          int64_t delay_us, const std::string& stats, const std::string& log) {
  auto relay = FindRelay();
  if (!relay.ok()) return relay.status();
  std::remove(stats.c_str());
  // Started in the background by a shell that exits at once, so the relay
  // belongs to init, not to this process; teardown kills it by namespace.
  const std::string command =
      absl::StrCat(ShellQuote(GetTools().ip), " netns exec ", netns, " ", ShellQuote(*relay), " --host-side ",
                   host_side, " --bridge-side ", bridge_side, " --delay-us ", delay_us, " --stats ",
                   ShellQuote(stats), " >>", ShellQuote(log), " 2>&1 &\n");
  const pid_t shell = SpawnDetachedShell(command, -1);
  if (shell < 0) return absl::InternalError(absl::StrCat("testbed: fork: ", std::strerror(errno)));
  waitpid(shell, nullptr, 0);
  // The relay writes its counters once its sockets are bound.
  const auto deadline = std::chrono::steady_clock::now() + kRelayTimeout;
  while (!fs::exists(stats)) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("testbed: the relay in ", netns, " did not start within ",
                                                      kRelayTimeout.count(), " s: ",
                                                      absl::StripAsciiWhitespace(ReadWholeFile(log))));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Testbed::SetDelay(int host, int delay_ms) {
  if (auto s = CheckHost(host); !s.ok()) return s;
  if (delay_ms < 0 || delay_ms > kMaxDelayMs) {
    return absl::InvalidArgumentError(absl::StrCat("testbed: delay_ms ", delay_ms, " is not in 0..", kMaxDelayMs));
  }
  return SetDelayUs(host, int64_t{delay_ms} * 1000);
}

absl::Status Testbed::SetDelayUs(int host, int64_t delay_us) {
  if (auto relay = FindRelay(); !relay.ok()) return relay.status();
  const Tools& t = GetTools();
  const Host& h = hosts_[host];
  if (Relayed(host)) {
    if (auto s = StopRelayIn(h.relay_netns); !s.ok()) return s;
  } else {
    // The bridge end's tbf (the shaping towards the host) does not survive
    // the move: it is put on the new bridge end, read back from tc.
    CommandResult shown = RunCommand({t.tc, "qdisc", "show", "dev", h.veth, "root"}, std::chrono::seconds(30));
    std::vector<std::string> tbf;
    if (size_t at = shown.out.find(" tbf "); at != std::string::npos) {
      std::stringstream in(shown.out.substr(at));
      for (std::string word, value; in >> word;) {
        if ((word == "rate" || word == "burst" || word == "lat") && in >> value) {
          tbf.insert(tbf.end(), {word == "lat" ? "latency" : word, value});
        }
      }
    }
    const std::string R = h.relay_netns;
    std::vector<std::vector<std::string>> steps = {
        {t.ip, "netns", "add", R},
        {t.ip, "link", "set", h.veth, "netns", R, "name", kRelayHostSide},
        {t.ip, "link", "add", h.veth, "type", "veth", "peer", "name", kRelayBridgeSide, "netns", R},
        {t.ip, "link", "set", h.veth, "master", BridgeOf(host), "up"},
    };
    // No IPv6 link-local addresses: the relay namespace's stack stays silent.
    for (const char* side : {kRelayHostSide, kRelayBridgeSide}) {
      steps.push_back({t.ip, "-n", R, "link", "set", side, "addrgenmode", "none"});
      steps.push_back({t.ip, "-n", R, "link", "set", side, "up"});
    }
    if (tbf.size() == 6) {
      std::vector<std::string> shape = {t.tc, "qdisc", "replace", "dev", h.veth, "root", "tbf"};
      shape.insert(shape.end(), tbf.begin(), tbf.end());
      steps.push_back(shape);
    }
    for (const auto& argv : steps) {
      if (auto s = Run(argv); !s.ok()) return s;
    }
  }
  if (auto s = StartRelayIn(h.relay_netns, kRelayHostSide, kRelayBridgeSide, delay_us, relay_stats_file(host),
                            relay_log_file(host));
      !s.ok()) {
    return s;
  }
  return WaitForLinks({host});
}

absl::StatusOr<std::string> Testbed::RelayStats(int host) const {
  if (auto s = CheckHost(host); !s.ok()) return s;
  if (!Relayed(host)) return absl::NotFoundError(absl::StrCat("testbed ", name_, ": host ", host, " has no relay"));
  return ReadWholeFile(relay_stats_file(host));
}

const std::string& Testbed::BridgeOf(int host) const {
  const int site = hosts_.at(host).site;
  return site < 0 ? bridge_ : sites_.at(site).bridge;
}

absl::Status Testbed::CheckSite(int site) const {
  if (site < 0 || site >= static_cast<int>(sites_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("testbed ", name_, ": no site ", site, " (it has ", sites_.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status Testbed::CheckSitePair(int a, int b) const {
  if (auto s = CheckSite(a); !s.ok()) return s;
  if (auto s = CheckSite(b); !s.ok()) return s;
  if (a == b) {
    return absl::InvalidArgumentError(absl::StrCat("testbed ", name_, ": site ", a, " cannot be cut from itself"));
  }
  return absl::OkStatus();
}

std::string Testbed::CutChain(int a, int b) const {
  return absl::StrCat("cut_", std::min(a, b), "_", std::max(a, b));
}

bool Testbed::SiteRelayed(int site) const {
  return fs::exists(std::string(kNetnsDir) + "/" + sites_.at(site).relay_netns);
}

absl::Status Testbed::CreateSite(const Site& site) {
  // The uplink is a veth pair from the site's bridge (uplink) to the core
  // bridge (core_port), or with a delay two pairs with the relay between:
  // uplink = tosite -relay- tocore = core_port. tbf on uplink shapes what the
  // site sends, on core_port what it receives; frames are shaped, then
  // delayed. No IPv6 link-local addresses on anything here: they would only
  // add chatter to the links.
  const Tools& t = GetTools();
  std::vector<std::vector<std::string>> steps = {
      {t.ip, "link", "add", site.bridge, "type", "bridge"},
      {t.ip, "link", "set", site.bridge, "addrgenmode", "none"},
      {t.ip, "link", "set", site.bridge, "up"},
  };
  const bool relayed = wan_delay_ms_ > 0;
  if (relayed) {
    const std::string& R = site.relay_netns;
    steps.push_back({t.ip, "netns", "add", R});
    steps.push_back({t.ip, "link", "add", site.uplink, "type", "veth", "peer", "name", kRelaySiteSide, "netns", R});
    steps.push_back({t.ip, "link", "add", site.core_port, "type", "veth", "peer", "name", kRelayCoreSide, "netns", R});
    for (const char* side : {kRelaySiteSide, kRelayCoreSide}) {
      steps.push_back({t.ip, "-n", R, "link", "set", side, "addrgenmode", "none"});
      steps.push_back({t.ip, "-n", R, "link", "set", side, "up"});
    }
  } else {
    steps.push_back({t.ip, "link", "add", site.uplink, "type", "veth", "peer", "name", site.core_port});
  }
  for (const auto& [end, bridge] : {std::pair<std::string, std::string>{site.uplink, site.bridge},
                                    {site.core_port, bridge_}}) {
    steps.push_back({t.ip, "link", "set", end, "addrgenmode", "none"});
    steps.push_back({t.ip, "link", "set", end, "master", bridge, "up"});
    if (!wan_rate_.empty()) {
      const ShapeOptions shape{wan_rate_};
      steps.push_back({t.tc, "qdisc", "replace", "dev", end, "root", "tbf", "rate", shape.rate, "burst", shape.burst,
                       "latency", shape.latency});
    }
  }
  for (const auto& argv : steps) {
    if (auto s = Run(argv); !s.ok()) return s;
  }
  if (!relayed) return absl::OkStatus();
  // Each uplink holds half the one-way delay between two sites.
  return StartRelayIn(site.relay_netns, kRelaySiteSide, kRelayCoreSide, int64_t{wan_delay_ms_} * 500,
                      site_relay_stats_file(site.index), site_relay_log_file(site.index));
}

absl::Status Testbed::WaitForSiteLinks(int site) const {
  const Site& s = sites_.at(site);
  const bool relayed = SiteRelayed(site);
  const auto deadline = std::chrono::steady_clock::now() + kLinkUpTimeout;
  while (true) {
    bool inside = true;
    if (relayed) {
      if (auto status = RunInNetns(s.relay_netns,
                                   [&] { inside = LinkRunning(kRelaySiteSide) && LinkRunning(kRelayCoreSide); });
          !status.ok()) {
        return status;
      }
    }
    if (inside && LinkRunning(s.uplink) && LinkRunning(s.core_port) && LinkRunning(s.bridge) && LinkRunning(bridge_)) {
      return absl::OkStatus();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("testbed: link of site ", site, " (", s.uplink, ") not up after ",
                                                      kLinkUpTimeout.count(), " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::Status Testbed::CutSite(int site) {
  if (auto s = CheckSite(site); !s.ok()) return s;
  // Both ends, so neither bridge forwards to it (a relay between them then
  // sees no carrier on either side).
  for (const auto& end : {sites_[site].uplink, sites_[site].core_port}) {
    if (auto s = Run({GetTools().ip, "link", "set", end, "down"}); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Testbed::RestoreSite(int site) {
  if (auto s = CheckSite(site); !s.ok()) return s;
  for (const auto& end : {sites_[site].uplink, sites_[site].core_port}) {
    if (auto s = Run({GetTools().ip, "link", "set", end, "up"}); !s.ok()) return s;
  }
  return WaitForSiteLinks(site);
}

absl::Status Testbed::CutBetweenSites(int a, int b) {
  if (auto s = CheckSitePair(a, b); !s.ok()) return s;
  // The sites' frames meet only at the core bridge, between their
  // core_ports: a bridge-family forward chain drops them there, while frames
  // to and from the root host (input/output, not forward) still pass. One
  // transaction: the chain is made or emptied, then filled.
  const std::string table = absl::StrCat("bridge ", name_);
  const std::string chain = absl::StrCat(table, " ", CutChain(a, b));
  const std::string& port_a = sites_[a].core_port;
  const std::string& port_b = sites_[b].core_port;
  const std::string rules =
      absl::StrCat("add table ", table, "; add chain ", chain,
                   " { type filter hook forward priority 0; policy accept; }; flush chain ", chain, "; add rule ",
                   chain, " iifname \"", port_a, "\" oifname \"", port_b, "\" counter drop; add rule ", chain,
                   " iifname \"", port_b, "\" oifname \"", port_a, "\" counter drop");
  return Run({GetTools().nft, rules});
}

absl::Status Testbed::RestoreBetweenSites(int a, int b) {
  if (auto s = CheckSitePair(a, b); !s.ok()) return s;
  // Create-then-delete: no error when there was no cut.
  const std::string table = absl::StrCat("bridge ", name_);
  const std::string chain = absl::StrCat(table, " ", CutChain(a, b));
  return Run({GetTools().nft, absl::StrCat("add table ", table, "; add chain ", chain,
                                           " { type filter hook forward priority 0; policy accept; }; delete chain ",
                                           chain)});
}

absl::StatusOr<std::string> Testbed::SiteRelayStats(int site) const {
  if (auto s = CheckSite(site); !s.ok()) return s;
  if (!SiteRelayed(site)) {
    return absl::NotFoundError(absl::StrCat("testbed ", name_, ": site ", site, " has no relay (no wan delay)"));
  }
  return ReadWholeFile(site_relay_stats_file(site));
}

absl::StatusOr<std::vector<TestbedRecord>> ListTestbeds() {
  std::vector<TestbedRecord> list;
  for (const auto& record : ReadRecords()) {
    list.push_back(TestbedRecord{record.json.value("name", ""), record.json.value("owner_pid", 0),
                                 OwnerGone(record.json), record.json.dump(2)});
  }
  return list;
}

absl::StatusOr<std::vector<std::string>> SweepStale() {
  if (auto s = EnsureStateDir(); !s.ok()) return s;
  StateLock lock;
  if (!lock.ok()) return LockFailed();
  return SweepStaleLocked();
}

namespace {

absl::StatusOr<std::vector<std::string>> SweepStaleLocked() {
  std::vector<std::string> removed;
  std::set<std::string> claimed;
  for (const auto& record : ReadRecords()) {
    const std::string name = record.json.value("name", "");
    if (!OwnerGone(record.json)) {
      claimed.insert(name);
      continue;
    }
    auto bed = Testbed::Open(name);
    if (!bed.ok()) {
      std::remove(record.path.c_str());  // unreadable: nothing to tear down by it
      continue;
    }
    if (absl::Status s = (*bed)->Down(); !s.ok()) return s;
    removed.push_back("testbed " + name);
  }
  // Objects named like a testbed's that no live record claims.
  const Tools& t = GetTools();
  for (const auto& netns : NetnsNames()) {
    const std::string owner = TestbedOf(netns);
    if (owner.empty() || claimed.count(owner)) continue;
    CommandResult pids = RunCommand({t.ip, "netns", "pids", netns}, std::chrono::seconds(30));
    std::stringstream in(pids.out);
    for (pid_t pid; in >> pid;) kill(pid, SIGKILL);
    if (auto s = Run({t.ip, "netns", "del", netns}); !s.ok()) return s;
    removed.push_back("namespace " + netns);
  }
  for (const auto& link : LinkNames()) {
    const std::string owner = TestbedOf(link);
    if (owner.empty() || claimed.count(owner) || !LinkExists(link)) continue;  // a veth may go with its peer
    if (auto s = Run({t.ip, "link", "del", link}); !s.ok()) return s;
    removed.push_back("link " + link);
  }
  // Tables of cuts between sites ("table bridge htb137") no live record
  // claims.
  for (const auto& table : CutTableNames()) {
    if (TestbedOf(table + "br") != table || claimed.count(table)) continue;
    if (auto s = Run({t.nft, "delete", "table", "bridge", table}); !s.ok()) return s;
    removed.push_back("nftables table bridge " + table);
  }
  // Relay counters and logs ("htb137-s0.relay", "htb137-h2.relay.log") of
  // testbeds no live record claims.
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(kStateDir, error)) {
    const std::string file = entry.path().filename();
    const size_t dash = file.find('-');
    if (dash == std::string::npos || file.find(".relay") == std::string::npos) continue;
    const std::string owner = file.substr(0, dash);
    if (TestbedOf(owner + "br") != owner || claimed.count(owner)) continue;
    if (fs::remove(entry.path(), error)) removed.push_back("file " + entry.path().string());
  }
  return removed;
}

}  // namespace
}  // namespace herd::testbed
