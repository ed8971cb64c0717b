// The testbed itself: hosts in 198.18.0.0/15 that reach each other over TCP,
// cut and restored links, shaping, loss, and teardown in every way a run can
// end (destructor, `down`, owner killed, sweep). Runs as root, like CI; a
// testbed that cannot be created fails the test with the reason.
#include "tests/testbed/testbed.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/harness/process.h"

namespace herd::testbed {
namespace {

namespace fs = std::filesystem;
using herd::testing::CommandResult;
using herd::testing::Process;
using herd::testing::RunCommand;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Cli() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return fs::absolute(fs::path(srcdir ? srcdir : ".") / "herd/tests/testbed/herd-testbed").string();
}

bool InBenchmarkRange(const std::string& address) {
  in_addr a{};
  if (inet_pton(AF_INET, address.c_str(), &a) != 1) return false;
  return (ntohl(a.s_addr) >> 17) == ((198u << 24 | 18u << 16) >> 17);
}

sockaddr_in Endpoint(const std::string& address, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  return addr;
}

// A socket of host `host` (-1: the root host, this namespace).
int SocketOn(const Testbed& bed, int host, int type) {
  int fd = -1;
  if (host < 0) return socket(AF_INET, type | SOCK_CLOEXEC, 0);
  absl::Status s = bed.RunInHost(host, [&] { fd = socket(AF_INET, type | SOCK_CLOEXEC, 0); });
  EXPECT_TRUE(s.ok()) << s;
  return fd;
}

std::string AddressOf(const Testbed& bed, int host) { return host < 0 ? bed.root_address() : bed.host(host).address; }

// A TCP listener on `host`'s address; returns its fd and sets `port`.
int Listen(const Testbed& bed, int host, int* port) {
  int fd = SocketOn(bed, host, SOCK_STREAM);
  sockaddr_in addr = Endpoint(AddressOf(bed, host), 0);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  EXPECT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

// Connects from `from` to address:port; the connected fd, or -1 if the
// connection fails or is not made within `timeout`.
int Connect(const Testbed& bed, int from, const std::string& address, int port, milliseconds timeout) {
  int fd = SocketOn(bed, from, SOCK_STREAM | SOCK_NONBLOCK);
  sockaddr_in addr = Endpoint(address, port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int error = 0;
  socklen_t len = sizeof(error);
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 ||
      error != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Whether a connection gets through within `timeout`. A connect can fail
// fast rather than time out (EHOSTUNREACH when an address resolution begun
// while a link was cut gives up): that attempt is over, not the question,
// so it tries again until the timeout.
bool CanConnect(const Testbed& bed, int from, int to, int port, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= milliseconds(0)) return false;
    int fd = Connect(bed, from, AddressOf(bed, to), port, left);
    if (fd >= 0) {
      close(fd);
      return true;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

std::unique_ptr<Testbed> MustCreate(int hosts) {
  TestbedOptions options;
  options.hosts = hosts;
  auto bed = Testbed::Create(options);
  // Not a skip: CI runs as root, so a testbed that cannot be made is a failure.
  EXPECT_TRUE(bed.ok()) << bed.status();
  return bed.ok() ? std::move(*bed) : nullptr;
}

bool NetnsExists(const std::string& name) { return fs::exists("/run/netns/" + name); }
bool LinkExists(const std::string& name) { return if_nametoindex(name.c_str()) != 0; }

// Polls until `gone` holds (teardown by another process); false after `timeout`.
bool WaitUntil(const std::function<bool()>& gone, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!gone()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

// Whether testbed `name` of `owner` is still listed (a parallel run may
// reuse the name once it is gone).
bool Listed(const std::string& name, pid_t owner) {
  auto all = ListTestbeds();
  if (!all.ok()) return false;
  for (const auto& record : *all) {
    if (record.name == name && record.owner_pid == owner) return true;
  }
  return false;
}

TEST(Testbed, HostsTalkTcpOverTheBridgeAndCutLinksDoNot) {
  auto bed = MustCreate(2);
  ASSERT_NE(bed, nullptr);
  EXPECT_EQ(bed->name().rfind(kNamePrefix, 0), 0u) << bed->name();
  EXPECT_TRUE(InBenchmarkRange(bed->root_address())) << bed->root_address();
  ASSERT_EQ(bed->hosts().size(), 2u);
  for (const auto& h : bed->hosts()) {
    EXPECT_TRUE(InBenchmarkRange(h.address)) << h.address;
    EXPECT_TRUE(NetnsExists(h.netns)) << h.netns;
    EXPECT_TRUE(LinkExists(h.veth)) << h.veth;
    EXPECT_LE(h.veth.size(), 15u);
  }
  EXPECT_TRUE(Listed(bed->name(), getpid()));

  int port0 = 0, port_root = 0;
  int listener0 = Listen(*bed, 0, &port0);
  int listener_root = Listen(*bed, -1, &port_root);
  EXPECT_TRUE(CanConnect(*bed, 1, 0, port0, seconds(10)));        // host to host, across the bridge
  EXPECT_TRUE(CanConnect(*bed, -1, 0, port0, seconds(10)));       // root host to host
  EXPECT_TRUE(CanConnect(*bed, 0, -1, port_root, seconds(10)));   // host to root host

  ASSERT_TRUE(bed->Cut(0).ok());
  EXPECT_FALSE(CanConnect(*bed, 1, 0, port0, seconds(2)));
  EXPECT_FALSE(CanConnect(*bed, 0, -1, port_root, seconds(2)));
  ASSERT_TRUE(bed->Restore(0).ok());
  EXPECT_TRUE(CanConnect(*bed, 1, 0, port0, seconds(10)));
  EXPECT_TRUE(CanConnect(*bed, 0, -1, port_root, seconds(10)));
  close(listener0);
  close(listener_root);

  const std::string name = bed->name();
  const Host h0 = bed->host(0);
  ASSERT_TRUE(bed->Down().ok());
  EXPECT_FALSE(NetnsExists(h0.netns));
  EXPECT_FALSE(LinkExists(h0.veth));
  EXPECT_FALSE(LinkExists(bed->bridge()));
  EXPECT_FALSE(Listed(name, getpid()));
}

TEST(Testbed, ShapingLimitsTheRate) {
  auto bed = MustCreate(1);
  ASSERT_NE(bed, nullptr);
  ASSERT_TRUE(bed->Shape(0, ShapeOptions{"8mbit"}).ok());
  int port = 0;
  int listener = Listen(*bed, 0, &port);
  // 1 MB from the root host to host 0 cannot take less than ~1 s at 8 Mbit/s
  // (less the 64 kB burst): a lower bound, which load cannot break.
  const auto start = std::chrono::steady_clock::now();
  std::thread receiver([&] {
    int conn = accept(listener, nullptr, nullptr);
    char buffer[65536];
    while (read(conn, buffer, sizeof(buffer)) > 0) {
    }
    close(conn);
  });
  int fd = Connect(*bed, -1, bed->host(0).address, port, seconds(10));
  ASSERT_GE(fd, 0);
  std::vector<char> data(1 << 20, 'x');
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = write(fd, data.data() + sent, data.size() - sent);
    ASSERT_GT(n, 0);
    sent += n;
  }
  shutdown(fd, SHUT_WR);
  receiver.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  close(listener);
  EXPECT_GE(elapsed, 0.85);
  EXPECT_TRUE(bed->Unshape(0).ok());
  EXPECT_TRUE(bed->Unshape(0).ok());  // nothing to remove: still fine
  EXPECT_FALSE(bed->Shape(0, ShapeOptions{""}).ok());
}

TEST(Testbed, LossDropsTheGivenShareOfPackets) {
  auto bed = MustCreate(1);
  ASSERT_NE(bed, nullptr);
  ASSERT_TRUE(bed->SetLoss(0, 10).ok());
  // 1000 datagrams out of host 0 at 10% loss: ~100 dropped (sd ~10).
  int receiver = SocketOn(*bed, -1, SOCK_DGRAM);
  sockaddr_in addr = Endpoint(bed->root_address(), 0);
  ASSERT_EQ(bind(receiver, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(receiver, reinterpret_cast<sockaddr*>(&addr), &len);
  int sender = SocketOn(*bed, 0, SOCK_DGRAM);
  for (int i = 0; i < 1000; ++i) {
    sendto(sender, "x", 1, 0, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  close(sender);
  close(receiver);
  auto dropped = bed->DroppedPackets(0);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_GE(*dropped, 40u);
  EXPECT_LE(*dropped, 250u);
  ASSERT_TRUE(bed->SetLoss(0, 0).ok());
  dropped = bed->DroppedPackets(0);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 0u);
  EXPECT_FALSE(bed->SetLoss(0, 101).ok());
  EXPECT_FALSE(bed->SetLoss(5, 1).ok());  // no such host
}

// Round trips (ms) of one byte over a TCP connection (TCP_NODELAY) from
// host `from` to a listener of host `to` that echoes it back.
std::vector<double> RoundTrips(const Testbed& bed, int from, int to, int count) {
  int port = 0;
  int listener = Listen(bed, to, &port);
  std::thread echo([&] {
    int conn = accept(listener, nullptr, nullptr);
    const int one = 1;
    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char byte;
    while (read(conn, &byte, 1) == 1 && write(conn, &byte, 1) == 1) {
    }
    close(conn);
  });
  std::vector<double> trips;
  int fd = Connect(bed, from, AddressOf(bed, to), port, seconds(10));
  EXPECT_GE(fd, 0);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char byte = 'x';
    for (int i = 0; i < count; ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (write(fd, &byte, 1) != 1 || read(fd, &byte, 1) != 1) break;
      trips.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    close(fd);
  } else {
    shutdown(listener, SHUT_RDWR);  // the echo thread's accept returns
  }
  echo.join();
  close(listener);
  EXPECT_EQ(trips.size(), static_cast<size_t>(count));
  return trips;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 1e9;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Min(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

// Host a to host b takes delay(a) + delay(b) each way: the round trip is
// twice that, never less (the relay holds every frame its full delay) and,
// measured, at most a few ms more. Without a delay it is well under 1 ms.
TEST(Testbed, DelayAddsTheConfiguredRoundTrip) {
  auto bed = MustCreate(2);
  ASSERT_NE(bed, nullptr);
  constexpr int kTrips = 21;
  // The margin over the configured round trip: the relay's own cost (four
  // passes, each a wake-up of a process on a loaded 2-core machine). Measured
  // here: +0.6 ms median on 50 ms, and 0.13 ms relayed with no delay.
  constexpr double kMarginMs = 10;
  const std::vector<double> plain = RoundTrips(*bed, 1, 0, kTrips);
  EXPECT_LT(Median(plain), 5) << "no delay yet";

  ASSERT_TRUE(bed->SetDelay(0, 10).ok());
  ASSERT_TRUE(bed->SetDelay(1, 15).ok());
  const std::vector<double> hosts = RoundTrips(*bed, 1, 0, kTrips);  // 2 x (10 + 15)
  const std::vector<double> root = RoundTrips(*bed, -1, 0, kTrips);  // 2 x 10
  std::cout << "round trip ms (min / median): no delay " << Min(plain) << " / " << Median(plain)
            << "; hosts 10 + 15 ms " << Min(hosts) << " / " << Median(hosts) << "; root to host 10 ms " << Min(root)
            << " / " << Median(root) << "\n";
  EXPECT_GE(Min(hosts), 50);
  EXPECT_LE(Median(hosts), 50 + kMarginMs);
  EXPECT_GE(Min(root), 20);
  EXPECT_LE(Median(root), 20 + kMarginMs);

  // The relay counted what it carried.
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto stats = bed->RelayStats(0);
        if (!stats.ok()) return false;
        auto json = nlohmann::json::parse(*stats, nullptr, false);
        return !json.is_discarded() && json["from_host"].value("frames", 0) > 0 &&
               json["to_host"].value("frames", 0) > 0 && json.value("delay_ms", 0) == 10;
      },
      seconds(10)));

  // Loss and cuts still work on a relayed link.
  ASSERT_TRUE(bed->SetLoss(0, 10).ok());
  int receiver = SocketOn(*bed, -1, SOCK_DGRAM);
  sockaddr_in addr = Endpoint(bed->root_address(), 0);
  ASSERT_EQ(bind(receiver, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(receiver, reinterpret_cast<sockaddr*>(&addr), &len);
  int sender = SocketOn(*bed, 0, SOCK_DGRAM);
  for (int i = 0; i < 1000; ++i) sendto(sender, "x", 1, 0, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  close(sender);
  close(receiver);
  auto dropped = bed->DroppedPackets(0);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_GE(*dropped, 40u);
  ASSERT_TRUE(bed->SetLoss(0, 0).ok());
  int port = 0;
  int listener = Listen(*bed, 0, &port);
  ASSERT_TRUE(bed->Cut(0).ok());
  EXPECT_FALSE(CanConnect(*bed, 1, 0, port, seconds(1)));
  ASSERT_TRUE(bed->Restore(0).ok());
  EXPECT_TRUE(CanConnect(*bed, 1, 0, port, seconds(10)));
  close(listener);

  // 0 keeps the relay but adds nothing.
  ASSERT_TRUE(bed->SetDelay(0, 0).ok());
  ASSERT_TRUE(bed->SetDelay(1, 0).ok());
  const std::vector<double> relayed = RoundTrips(*bed, 1, 0, kTrips);
  std::cout << "relayed, no delay: " << Min(relayed) << " / " << Median(relayed) << " ms\n";
  EXPECT_LT(Median(relayed), 5);

  EXPECT_FALSE(bed->SetDelay(0, -1).ok());
  EXPECT_FALSE(bed->SetDelay(0, 10001).ok());
  EXPECT_FALSE(bed->SetDelay(2, 10).ok());  // no such host
  const std::string relay_netns = bed->host(0).relay_netns;
  EXPECT_TRUE(NetnsExists(relay_netns));
  ASSERT_TRUE(bed->Down().ok());
  EXPECT_FALSE(NetnsExists(relay_netns));
}

// Payload rates (Mbit/s) of one TCP transfer of `bytes` from `from` to `to`
// (-1: the root host): over the whole transfer, and over its second half,
// past slow start.
struct Rates {
  double whole = 0;
  double steady = 0;
};

Rates Transfer(const Testbed& bed, int from, int to, size_t bytes) {
  int port = 0;
  int listener = Listen(bed, to, &port);
  // When the receiver saw each quarter of the data.
  std::vector<std::chrono::steady_clock::time_point> quarters;
  std::thread receiver([&] {
    int conn = accept(listener, nullptr, nullptr);
    std::vector<char> buffer(1 << 16);
    size_t got = 0;
    for (ssize_t n; conn >= 0 && (n = read(conn, buffer.data(), buffer.size())) > 0;) {
      got += n;
      while (quarters.size() < 4 && got >= (quarters.size() + 1) * bytes / 4) {
        quarters.push_back(std::chrono::steady_clock::now());
      }
    }
    if (conn >= 0) close(conn);
  });
  const std::vector<char> data(bytes, 'x');
  const auto start = std::chrono::steady_clock::now();
  int fd = Connect(bed, from, AddressOf(bed, to), port, seconds(10));
  EXPECT_GE(fd, 0);
  if (fd >= 0) {
    for (size_t sent = 0; sent < data.size();) {
      ssize_t n = write(fd, data.data() + sent, data.size() - sent);
      if (n <= 0) break;
      sent += n;
    }
    shutdown(fd, SHUT_WR);
  } else {
    shutdown(listener, SHUT_RDWR);  // the receiver's accept returns
  }
  receiver.join();
  if (fd >= 0) close(fd);
  close(listener);
  EXPECT_EQ(quarters.size(), 4u);
  if (quarters.size() != 4) return {};
  auto mbit = [](size_t n, auto begin, auto end) {
    return n * 8 / 1e6 / std::chrono::duration<double>(end - begin).count();
  };
  return {mbit(bytes, start, quarters[3]), mbit(bytes / 2, quarters[1], quarters[3])};
}

// A bulk transfer through a shaped and delayed link (100 Mbit/s, 50 ms each
// way: 100 ms round trip, a 1.25 MB window) reaches most of the rate.
TEST(Testbed, ShapedAndDelayedLinkCarriesTheRate) {
  TestbedOptions options;
  options.hosts = 1;
  options.delay_ms = 50;
  auto created = Testbed::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  auto& bed = *created;
  ASSERT_TRUE(bed->Shape(0, ShapeOptions{"100mbit"}).ok());
  const Rates rates = Transfer(*bed, -1, 0, 40 << 20);
  std::cout << "100 Mbit/s, 50 ms each way: " << rates.whole << " Mbit/s overall, " << rates.steady
            << " Mbit/s over the second half\n";
  EXPECT_LE(rates.steady, 105);  // tbf still limits
  EXPECT_GE(rates.steady, 80);
  auto stats = bed->RelayStats(0);
  ASSERT_TRUE(stats.ok());
  std::cout << "relay: " << *stats;
}

// A typical two-datacenter shape: 2 sites x 2 hosts, 1 Gbit/s inside a site, 50 Mbit/s
// and 40 ms one way between the sites.
TestbedOptions TwoSites(std::string site_rate, int site_delay_ms, std::string wan_rate, int wan_delay_ms) {
  TestbedOptions options;
  options.sites = 2;
  options.hosts_per_site = 2;
  options.site_rate = std::move(site_rate);
  options.site_delay_ms = site_delay_ms;
  options.wan_rate = std::move(wan_rate);
  options.wan_delay_ms = wan_delay_ms;
  return options;
}

// Every named object of a testbed in the root namespace or /run/netns.
std::vector<std::string> ObjectsOf(const std::string& testbed) {
  std::vector<std::string> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/run/netns", error)) {
    const std::string name = entry.path().filename();
    if (name.rfind(testbed, 0) == 0 && name.size() > testbed.size() && !std::isdigit(name[testbed.size()])) {
      found.push_back("namespace " + name);
    }
  }
  if (struct if_nameindex* links = if_nameindex(); links != nullptr) {
    for (auto* link = links; link->if_index != 0; ++link) {
      const std::string name = link->if_name;
      if (name.rfind(testbed, 0) == 0 && name.size() > testbed.size() && !std::isdigit(name[testbed.size()])) {
        found.push_back("link " + name);
      }
    }
    if_freenameindex(links);
  }
  // Cuts between sites: a bridge-family table named like the testbed.
  const std::string nft = access("/usr/sbin/nft", X_OK) == 0 ? "/usr/sbin/nft" : "/sbin/nft";
  CommandResult tables = RunCommand({nft, "list", "tables", "bridge"}, seconds(30));
  EXPECT_EQ(tables.exit_code, 0) << nft << ": " << tables.err;
  if (tables.out.find("table bridge " + testbed + "\n") != std::string::npos) {
    found.push_back("nftables table bridge " + testbed);
  }
  return found;
}

// Round trips inside a site are the bridge's (no delay asked), across sites
// twice the inter-site delay; a bulk transfer across sites runs at the
// inter-site rate and inside a site far faster, within the site rate.
TEST(Testbed, SitesHaveTheConfiguredRoundTripsAndRates) {
  auto created = Testbed::Create(TwoSites("1gbit", 0, "50mbit", 40));
  ASSERT_TRUE(created.ok()) << created.status();
  auto& bed = *created;
  ASSERT_EQ(bed->hosts().size(), 4u);
  ASSERT_EQ(bed->sites().size(), 2u);
  const std::vector<std::string> names = {"s0h0", "s0h1", "s1h0", "s1h1"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(bed->host(i).site, i / 2);
    EXPECT_EQ(bed->host(i).name, names[i]);
    EXPECT_EQ(bed->HostIndex(i / 2, i % 2), i);
    EXPECT_TRUE(InBenchmarkRange(bed->host(i).address)) << bed->host(i).address;
  }
  for (const auto& site : bed->sites()) {
    for (const auto& link : {site.bridge, site.uplink, site.core_port}) {
      EXPECT_TRUE(LinkExists(link)) << link;
      EXPECT_LE(link.size(), 15u);
    }
    EXPECT_TRUE(NetnsExists(site.relay_netns)) << site.relay_netns;
  }
  EXPECT_EQ(bed->site(1).hosts, (std::vector<int>{2, 3}));

  constexpr int kTrips = 21;
  constexpr double kMarginMs = 10;  // as in DelayAddsTheConfiguredRoundTrip
  const std::vector<double> inside0 = RoundTrips(*bed, 1, 0, kTrips);
  const std::vector<double> inside1 = RoundTrips(*bed, 3, 2, kTrips);
  const std::vector<double> across = RoundTrips(*bed, 2, 0, kTrips);   // 2 x 40
  const std::vector<double> to_root = RoundTrips(*bed, -1, 3, kTrips);  // 2 x 40 / 2: the core is halfway
  std::cout << "round trip ms (min / median): inside site 0 " << Min(inside0) << " / " << Median(inside0)
            << ", inside site 1 " << Min(inside1) << " / " << Median(inside1) << ", across " << Min(across) << " / "
            << Median(across) << ", root host to site 1 " << Min(to_root) << " / " << Median(to_root) << "\n";
  EXPECT_LT(Median(inside0), 5);
  EXPECT_LT(Median(inside1), 5);
  EXPECT_GE(Min(across), 80);
  EXPECT_LE(Median(across), 80 + kMarginMs);
  EXPECT_GE(Min(to_root), 40);
  EXPECT_LE(Median(to_root), 40 + kMarginMs);

  // Across: 50 Mbit/s of frames (two tbfs in series, one per uplink) with an
  // 80 ms round trip; 24 MB is ~4 s, the second half well past slow start.
  const Rates wan = Transfer(*bed, 0, 2, 24 << 20);
  // Inside: 1 Gbit/s of frames, no relay; the floor is a quarter of it (five
  // times the inter-site rate), far above what an uplink could carry.
  const Rates lan = Transfer(*bed, 3, 2, 96 << 20);
  std::cout << "across sites (50 Mbit/s): " << wan.whole << " Mbit/s overall, " << wan.steady
            << " over the second half; inside a site (1 Gbit/s): " << lan.whole << " overall, " << lan.steady
            << " over the second half\n";
  // The ceiling is on the whole transfer: tbf passes at most its rate (plus
  // one burst) from the start, whereas the second half can run faster than
  // the link when the receiving thread was starved earlier and queues (tbf,
  // socket buffers: tens of MB at 1 Gbit/s) drain into it at once. The floor
  // is on the second half, past slow start.
  EXPECT_LE(wan.whole, 50 * 1.05);
  EXPECT_GE(wan.steady, 50 * 0.8);
  EXPECT_LE(lan.whole, 1000 * 1.05);
  EXPECT_GE(lan.steady, 1000 / 4.0);
  // A loaded machine may not reach 1 Gbit/s unshaped either, so the ceiling
  // alone cannot show the site's shaping: both ends of every host's link
  // carry a tbf at the site rate, and the one the data left through held it
  // back (overlimits).
  for (const auto& h : bed->hosts()) {
    const std::vector<std::string> bridge_end = {"/usr/sbin/tc", "-s", "qdisc", "show", "dev", h.veth};
    const std::vector<std::string> host_end = {"/usr/sbin/tc", "-n", h.netns, "-s", "qdisc", "show", "dev", "eth0"};
    for (const auto& show : {bridge_end, host_end}) {
      CommandResult shown = RunCommand(show, seconds(30));
      EXPECT_NE(shown.out.find("tbf"), std::string::npos) << shown.out << shown.err;
      EXPECT_NE(shown.out.find("rate 1Gbit"), std::string::npos) << shown.out << shown.err;
      if (show == host_end && h.index == 3) {  // the sender of the transfer inside site 1
        EXPECT_EQ(shown.out.find("overlimits 0 "), std::string::npos) << shown.out;
      }
    }
  }
  for (int site : {0, 1}) {
    auto stats = bed->SiteRelayStats(site);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(nlohmann::json::parse(*stats, nullptr, false).value("delay_us", -1), 20000) << *stats;
  }
  EXPECT_FALSE(bed->SiteRelayStats(2).ok());

  const std::string name = bed->name();
  ASSERT_TRUE(bed->Down().ok());
  EXPECT_EQ(ObjectsOf(name), std::vector<std::string>{});
}

// A site's delay is between two of its hosts; across sites it adds to the
// inter-site delay. An odd inter-site delay splits exactly over the uplinks.
TEST(Testbed, SiteDelayAppliesInsideAndAcrossSites) {
  auto created = Testbed::Create(TwoSites("", 6, "", 15));
  ASSERT_TRUE(created.ok()) << created.status();
  auto& bed = *created;
  constexpr int kTrips = 21;
  constexpr double kMarginMs = 10;
  const std::vector<double> inside = RoundTrips(*bed, 3, 2, kTrips);   // 2 x 6
  const std::vector<double> across = RoundTrips(*bed, 1, 2, kTrips);   // 2 x (6 + 15)
  const std::vector<double> to_root = RoundTrips(*bed, -1, 0, kTrips);  // 2 x (3 + 7.5)
  std::cout << "round trip ms (min / median): inside " << Min(inside) << " / " << Median(inside) << ", across "
            << Min(across) << " / " << Median(across) << ", root host to a host " << Min(to_root) << " / "
            << Median(to_root) << "\n";
  EXPECT_GE(Min(inside), 12);
  EXPECT_LE(Median(inside), 12 + kMarginMs);
  EXPECT_GE(Min(across), 42);
  EXPECT_LE(Median(across), 42 + kMarginMs);
  EXPECT_GE(Min(to_root), 21);
  EXPECT_LE(Median(to_root), 21 + kMarginMs);
  auto stats = bed->RelayStats(0);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(nlohmann::json::parse(*stats, nullptr, false).value("delay_us", -1), 3000) << *stats;
  stats = bed->SiteRelayStats(1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(nlohmann::json::parse(*stats, nullptr, false).value("delay_us", -1), 7500) << *stats;
}

// Cutting a site's link partitions the sites: inside each site hosts still
// talk, across they do not, and the root host (the core) keeps the other
// site. Restored, new connections cross again and one made before the cut
// carries data again. With and without a relay on the uplinks.
TEST(Testbed, CuttingASiteLinkStopsOnlyCrossSiteTraffic) {
  for (int wan_delay_ms : {0, 10}) {
    SCOPED_TRACE(absl::StrCat("wan_delay_ms ", wan_delay_ms));
    auto created = Testbed::Create(TwoSites("", 0, "100mbit", wan_delay_ms));
    ASSERT_TRUE(created.ok()) << created.status();
    auto& bed = *created;
    std::vector<int> listeners, ports(4);
    for (int i = 0; i < 4; ++i) listeners.push_back(Listen(*bed, i, &ports[i]));
    // A connection across, made before the cut, echoing one byte at a time.
    int echo_port = 0;
    int echo_listener = Listen(*bed, 2, &echo_port);
    int before = Connect(*bed, 0, bed->host(2).address, echo_port, seconds(10));
    ASSERT_GE(before, 0);
    int echoed = accept(echo_listener, nullptr, nullptr);
    ASSERT_GE(echoed, 0);
    char byte = 'a';
    ASSERT_EQ(write(before, &byte, 1), 1);
    ASSERT_EQ(read(echoed, &byte, 1), 1);

    ASSERT_TRUE(bed->CutSite(1).ok());
    EXPECT_TRUE(CanConnect(*bed, 1, 0, ports[0], seconds(10)));   // inside site 0
    EXPECT_TRUE(CanConnect(*bed, 3, 2, ports[2], seconds(10)));   // inside site 1
    EXPECT_TRUE(CanConnect(*bed, -1, 1, ports[1], seconds(10)));  // the core keeps site 0
    EXPECT_FALSE(CanConnect(*bed, 0, 2, ports[2], seconds(1)));
    EXPECT_FALSE(CanConnect(*bed, 3, 1, ports[1], seconds(1)));
    EXPECT_FALSE(CanConnect(*bed, -1, 3, ports[3], seconds(1)));

    ASSERT_TRUE(bed->RestoreSite(1).ok());
    EXPECT_TRUE(CanConnect(*bed, 0, 2, ports[2], seconds(10)));
    EXPECT_TRUE(CanConnect(*bed, 3, 1, ports[1], seconds(10)));
    EXPECT_TRUE(CanConnect(*bed, -1, 3, ports[3], seconds(10)));
    byte = 'b';
    ASSERT_EQ(write(before, &byte, 1), 1);
    ASSERT_EQ(read(echoed, &byte, 1), 1);
    EXPECT_EQ(byte, 'b');

    EXPECT_FALSE(bed->CutSite(2).ok());
    EXPECT_FALSE(bed->RestoreSite(-1).ok());
    for (int fd : listeners) close(fd);
    for (int fd : {before, echoed, echo_listener}) close(fd);
    const std::string name = bed->name();
    ASSERT_TRUE(bed->Down().ok());
    EXPECT_EQ(ObjectsOf(name), std::vector<std::string>{});
  }
}

// Cutting between two sites leaves each its own hosts and the core (the
// root host, where the coordinator runs): a WAN partition between
// datacenters that both still see the control plane. Restored, new
// connections cross again and one made before the cut carries data again.
// The CLI does the same; the cut's table goes with the testbed.
TEST(Testbed, CuttingBetweenSitesKeepsEachSiteWithTheCore) {
  for (int wan_delay_ms : {0, 10}) {
    SCOPED_TRACE(absl::StrCat("wan_delay_ms ", wan_delay_ms));
    auto created = Testbed::Create(TwoSites("", 0, "100mbit", wan_delay_ms));
    ASSERT_TRUE(created.ok()) << created.status();
    auto& bed = *created;
    std::vector<int> listeners, ports(4);
    for (int i = 0; i < 4; ++i) listeners.push_back(Listen(*bed, i, &ports[i]));
    int port_root = 0;
    listeners.push_back(Listen(*bed, -1, &port_root));
    int echo_port = 0;
    int echo_listener = Listen(*bed, 2, &echo_port);
    int before = Connect(*bed, 0, bed->host(2).address, echo_port, seconds(10));
    ASSERT_GE(before, 0);
    int echoed = accept(echo_listener, nullptr, nullptr);
    ASSERT_GE(echoed, 0);
    char byte = 'a';
    ASSERT_EQ(write(before, &byte, 1), 1);
    ASSERT_EQ(read(echoed, &byte, 1), 1);

    ASSERT_TRUE(bed->CutBetweenSites(0, 1).ok());
    ASSERT_TRUE(bed->CutBetweenSites(1, 0).ok());  // the same cut again: no error
    EXPECT_TRUE(CanConnect(*bed, 1, 0, ports[0], seconds(10)));    // inside site 0
    EXPECT_TRUE(CanConnect(*bed, 3, 2, ports[2], seconds(10)));    // inside site 1
    EXPECT_TRUE(CanConnect(*bed, 0, -1, port_root, seconds(10)));  // site 0 to the core
    EXPECT_TRUE(CanConnect(*bed, 3, -1, port_root, seconds(10)));  // site 1 to the core
    EXPECT_TRUE(CanConnect(*bed, -1, 1, ports[1], seconds(10)));   // the core to each site
    EXPECT_TRUE(CanConnect(*bed, -1, 2, ports[2], seconds(10)));
    EXPECT_FALSE(CanConnect(*bed, 0, 2, ports[2], seconds(1)));
    EXPECT_FALSE(CanConnect(*bed, 3, 1, ports[1], seconds(1)));

    ASSERT_TRUE(bed->RestoreBetweenSites(1, 0).ok());
    ASSERT_TRUE(bed->RestoreBetweenSites(0, 1).ok());  // no cut left: no error
    EXPECT_TRUE(CanConnect(*bed, 0, 2, ports[2], seconds(10)));
    EXPECT_TRUE(CanConnect(*bed, 3, 1, ports[1], seconds(10)));
    byte = 'b';
    ASSERT_EQ(write(before, &byte, 1), 1);
    ASSERT_EQ(read(echoed, &byte, 1), 1);
    EXPECT_EQ(byte, 'b');

    EXPECT_FALSE(bed->CutBetweenSites(0, 0).ok());
    EXPECT_FALSE(bed->CutBetweenSites(0, 2).ok());
    EXPECT_FALSE(bed->RestoreBetweenSites(-1, 1).ok());

    // The CLI, on the same testbed; teardown then removes the cut's table.
    const std::string name = bed->name();
    CommandResult cut = RunCommand({Cli(), "cut-between", name, "s0", "1"}, seconds(30));
    EXPECT_EQ(cut.exit_code, 0) << cut.err;
    EXPECT_FALSE(CanConnect(*bed, 0, 2, ports[2], seconds(1)));
    EXPECT_TRUE(CanConnect(*bed, 0, -1, port_root, seconds(10)));
    CommandResult bad = RunCommand({Cli(), "cut-between", name, "s0", "s2"}, seconds(30));
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.err.find("no site 's2'"), std::string::npos) << bad.err;
    CommandResult restore = RunCommand({Cli(), "restore-between", name, "s0", "s1"}, seconds(30));
    EXPECT_EQ(restore.exit_code, 0) << restore.err;
    EXPECT_TRUE(CanConnect(*bed, 0, 2, ports[2], seconds(10)));
    ASSERT_TRUE(bed->CutBetweenSites(0, 1).ok());

    for (int fd : listeners) close(fd);
    for (int fd : {before, echoed, echo_listener}) close(fd);
    ASSERT_TRUE(bed->Down().ok());
    EXPECT_EQ(ObjectsOf(name), std::vector<std::string>{});
  }
}

// Bad site options are refused, naming what is wrong; a creation that fails
// half-way (tc refuses the rate) leaves no namespace, link or state file.
TEST(Testbed, SiteOptionsAreCheckedAndAFailedCreationLeavesNothing) {
  auto refused = [](TestbedOptions options, const std::string& says) {
    auto bed = Testbed::Create(options);
    EXPECT_FALSE(bed.ok());
    if (!bed.ok()) {
      EXPECT_EQ(bed.status().code(), absl::StatusCode::kInvalidArgument) << bed.status();
      EXPECT_NE(bed.status().message().find(says), std::string::npos) << bed.status();
    }
  };
  TestbedOptions options = TwoSites("", 0, "", 0);
  options.sites = 21;
  refused(options, "sites 21");
  options = TwoSites("", 0, "", 0);
  options.hosts_per_site = 0;
  refused(options, "hosts_per_site 0");
  options = TwoSites("", 0, "", 0);
  options.hosts = 5;
  refused(options, "hosts 5 is not sites x hosts_per_site (4)");
  options = TwoSites("", 0, "", 0);
  options.delay_ms = 5;
  refused(options, "site_delay_ms");
  options = TwoSites("", 0, "", -1);
  refused(options, "wan_delay_ms -1");
  options = TestbedOptions{};
  options.wan_rate = "50mbit";
  refused(options, "need sites");

  auto bed = Testbed::Create(TwoSites("", 0, "fast", 10));
  ASSERT_FALSE(bed.ok());
  const std::string message(bed.status().message());
  EXPECT_NE(message.find("tbf rate fast"), std::string::npos) << message;
  // The testbed's name, from the failed command's device ("htb137u0").
  const size_t at = message.find(kNamePrefix);
  ASSERT_NE(at, std::string::npos) << message;
  size_t end = at + std::strlen(kNamePrefix);
  while (end < message.size() && std::isdigit(message[end])) ++end;
  const std::string name = message.substr(at, end - at);
  // A parallel run may take the name once it is free: then it is listed.
  bool reused = false;
  auto all = ListTestbeds();
  ASSERT_TRUE(all.ok());
  for (const auto& record : *all) {
    EXPECT_NE(record.owner_pid, getpid()) << record.json;
    reused = reused || record.name == name;
  }
  if (!reused) {
    EXPECT_EQ(ObjectsOf(name), std::vector<std::string>{});
  }
}

// The CLI's testbed lives past the CLI; it goes when its owner exits, with
// its relays (--delay-ms).
TEST(Testbed, CliTestbedGoesWithItsOwner) {
  Process owner({"/bin/sleep", "600"}, "/dev/null");
  CommandResult up = RunCommand(
      {Cli(), "up", "--hosts", "2", "--delay-ms", "5", "--owner-pid", std::to_string(owner.pid())}, seconds(60));
  ASSERT_EQ(up.exit_code, 0) << up.err;
  auto json = nlohmann::json::parse(up.out);
  const std::string name = json["name"];
  const std::string netns = json["hosts"][1]["netns"];
  const std::string relay_netns = json["hosts"][1]["relay_netns"];
  EXPECT_TRUE(NetnsExists(relay_netns));
  CommandResult stats = RunCommand({Cli(), "relay-stats", name, "h1"}, seconds(30));
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(nlohmann::json::parse(stats.out, nullptr, false).value("delay_ms", -1), 5) << stats.out;
  CommandResult delayed = RunCommand({Cli(), "delay", name, "h1", "7"}, seconds(30));
  EXPECT_EQ(delayed.exit_code, 0) << delayed.err;
  const std::string address = json["hosts"][1]["address"];
  EXPECT_TRUE(InBenchmarkRange(address));
  ASSERT_TRUE(NetnsExists(netns));

  // exec runs inside the host: its eth0 carries the host's address.
  CommandResult inside = RunCommand({Cli(), "exec", name, "h1", "--", "/bin/cat", "/proc/net/fib_trie"}, seconds(30));
  EXPECT_EQ(inside.exit_code, 0) << inside.err;
  EXPECT_NE(inside.out.find(address), std::string::npos) << inside.out;
  CommandResult shown = RunCommand({Cli(), "show", name}, seconds(30));
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  CommandResult shaped = RunCommand({Cli(), "shape", name, "0", "100mbit"}, seconds(30));
  EXPECT_EQ(shaped.exit_code, 0) << shaped.err;
  CommandResult bad_host = RunCommand({Cli(), "cut", name, "7"}, seconds(30));
  EXPECT_EQ(bad_host.exit_code, 2);

  owner.Signal(SIGKILL);
  owner.Wait(seconds(10));
  EXPECT_TRUE(WaitUntil([&] { return !NetnsExists(netns) && !NetnsExists(relay_netns) && !Listed(name, owner.pid()); },
                        seconds(20)))
      << "testbed " << name << " outlived its owner";
}

// `up --sites`: hosts named by site, the site commands, and everything of
// it (site bridges, uplinks, both kinds of relay) gone with its owner.
TEST(Testbed, CliSitesTestbedGoesWithItsOwner) {
  CommandResult both = RunCommand({Cli(), "up", "--hosts", "2", "--sites", "2"}, seconds(60));
  EXPECT_EQ(both.exit_code, 2) << both.err;  // --hosts or --sites, not both
  Process owner({"/bin/sleep", "600"}, "/dev/null");
  CommandResult up = RunCommand({Cli(), "up", "--sites", "2", "--hosts-per-site", "1", "--site-rate", "1gbit",
                                 "--site-delay-ms", "2", "--wan-rate", "100mbit", "--wan-delay-ms", "4",
                                 "--owner-pid", std::to_string(owner.pid())},
                                seconds(60));
  ASSERT_EQ(up.exit_code, 0) << up.err;
  auto json = nlohmann::json::parse(up.out);
  const std::string name = json["name"];
  EXPECT_EQ(json["hosts"][1]["name"], "s1h0");
  EXPECT_EQ(json["hosts"][1]["site"], 1);
  EXPECT_EQ(json["sites"][1]["hosts"], nlohmann::json::array({1}));
  EXPECT_EQ(json["wan_rate"], "100mbit");
  EXPECT_EQ(json["wan_delay_ms"], 4);
  std::vector<std::string> namespaces = {json["hosts"][1]["netns"], json["hosts"][1]["relay_netns"],
                                         json["sites"][1]["relay_netns"]};
  for (const auto& netns : namespaces) EXPECT_TRUE(NetnsExists(netns)) << netns;
  const std::string site_bridge = json["sites"][1]["bridge"];
  EXPECT_TRUE(LinkExists(site_bridge));

  CommandResult host_stats = RunCommand({Cli(), "relay-stats", name, "s1h0"}, seconds(30));
  EXPECT_EQ(host_stats.exit_code, 0) << host_stats.err;
  EXPECT_EQ(nlohmann::json::parse(host_stats.out, nullptr, false).value("delay_us", -1), 1000) << host_stats.out;
  CommandResult site_stats = RunCommand({Cli(), "site-relay-stats", name, "s1"}, seconds(30));
  EXPECT_EQ(site_stats.exit_code, 0) << site_stats.err;
  EXPECT_EQ(nlohmann::json::parse(site_stats.out, nullptr, false).value("delay_us", -1), 2000) << site_stats.out;
  CommandResult inside = RunCommand({Cli(), "exec", name, "s1h0", "--", "/bin/cat", "/proc/net/fib_trie"}, seconds(30));
  EXPECT_EQ(inside.exit_code, 0) << inside.err;
  EXPECT_NE(inside.out.find(json["hosts"][1]["address"].get<std::string>()), std::string::npos) << inside.out;
  CommandResult cut = RunCommand({Cli(), "cut-site", name, "1"}, seconds(30));
  EXPECT_EQ(cut.exit_code, 0) << cut.err;
  CommandResult restore = RunCommand({Cli(), "restore-site", name, "s1"}, seconds(30));
  EXPECT_EQ(restore.exit_code, 0) << restore.err;
  CommandResult bad_site = RunCommand({Cli(), "cut-site", name, "2"}, seconds(30));
  EXPECT_EQ(bad_site.exit_code, 2);
  EXPECT_NE(bad_site.err.find("no site '2'"), std::string::npos) << bad_site.err;
  CommandResult bad_host = RunCommand({Cli(), "cut", name, "s2h0"}, seconds(30));
  EXPECT_EQ(bad_host.exit_code, 2);

  owner.Signal(SIGKILL);
  owner.Wait(seconds(10));
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (const auto& netns : namespaces) {
          if (NetnsExists(netns)) return false;
        }
        return !LinkExists(site_bridge) && !Listed(name, owner.pid());
      },
      seconds(20)))
      << "testbed " << name << " outlived its owner";
  if (!Listed(name, owner.pid())) {
    EXPECT_EQ(ObjectsOf(name), std::vector<std::string>{});
  }
}

TEST(Testbed, SweepRemovesTestbedsOfDeadOwners) {
  Process owner({"/bin/sleep", "600"}, "/dev/null");
  CommandResult up = RunCommand(
      {Cli(), "up", "--hosts", "1", "--owner-pid", std::to_string(owner.pid()), "--no-watchdog", "--delay-ms", "1"},
      seconds(60));
  ASSERT_EQ(up.exit_code, 0) << up.err;
  auto json = nlohmann::json::parse(up.out);
  const std::string name = json["name"];
  const std::string netns = json["hosts"][0]["netns"];
  const std::string relay_netns = json["hosts"][0]["relay_netns"];
  ASSERT_TRUE(NetnsExists(netns));
  ASSERT_TRUE(NetnsExists(relay_netns));
  const pid_t owner_pid = owner.pid();
  owner.Signal(SIGKILL);
  owner.Wait(seconds(10));
  // From here any run's sweep (every creation sweeps) may remove it first.
  auto all = ListTestbeds();
  ASSERT_TRUE(all.ok());
  for (const auto& record : *all) {
    if (record.name == name && record.owner_pid == owner_pid) {
      EXPECT_TRUE(record.stale) << record.json;
    }
  }
  CommandResult sweep = RunCommand({Cli(), "sweep"}, seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.err;
  EXPECT_FALSE(NetnsExists(netns)) << sweep.out;
  EXPECT_FALSE(NetnsExists(relay_netns)) << sweep.out;
  EXPECT_FALSE(Listed(name, owner_pid)) << sweep.out;
}

// A site testbed's objects that no state file claims any more (a run killed
// mid-teardown) are recognised and removed by a sweep: site bridges,
// uplinks and the uplinks' relays included.
TEST(Testbed, SweepRemovesOrphanedSiteObjects) {
  Process owner({"/bin/sleep", "600"}, "/dev/null");
  CommandResult up = RunCommand({Cli(), "up", "--sites", "2", "--hosts-per-site", "1", "--wan-delay-ms", "1",
                                 "--owner-pid", std::to_string(owner.pid()), "--no-watchdog"},
                                seconds(60));
  ASSERT_EQ(up.exit_code, 0) << up.err;
  const std::string name = nlohmann::json::parse(up.out)["name"];
  EXPECT_GE(ObjectsOf(name).size(), 12u);  // 2 x (host, bridge, uplink, core port, relay namespace, host link)
  CommandResult cut = RunCommand({Cli(), "cut-between", name, "s0", "s1"}, seconds(30));
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  const std::vector<std::string> objects = ObjectsOf(name);
  ASSERT_NE(std::find(objects.begin(), objects.end(), "nftables table bridge " + name), objects.end());
  ASSERT_TRUE(fs::remove(std::string(kStateDir) + "/" + name + ".json"));
  owner.Signal(SIGKILL);
  owner.Wait(seconds(10));
  CommandResult sweep = RunCommand({Cli(), "sweep"}, seconds(60));
  EXPECT_EQ(sweep.exit_code, 0) << sweep.err;
  // A parallel run may take the name once it is free: then it is listed.
  auto all = ListTestbeds();
  ASSERT_TRUE(all.ok());
  bool reused = false;
  for (const auto& record : *all) reused = reused || record.name == name;
  if (!reused) {
    EXPECT_EQ(ObjectsOf(name), std::vector<std::string>{}) << sweep.out;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(kStateDir, error)) {
      EXPECT_NE(entry.path().filename().string().rfind(name + "-", 0), 0u) << entry.path() << " left";
    }
  }
}

// A test process killed outright (a Bazel timeout) still leaves nothing:
// its watchdog sees the process go and tears the testbed down.
TEST(Testbed, KilledOwnerProcessLeavesNothing) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  const char* tmp = std::getenv("TEST_TMPDIR");
  // The child (this binary run again) names the file by its parent: us.
  auto name_file = [&](pid_t test_pid) {
    return std::string(tmp ? tmp : "/tmp") + "/killed-testbed-" + std::to_string(test_pid);
  };
  EXPECT_EXIT(
      {
        TestbedOptions options;
        options.hosts = 1;
        auto bed = Testbed::Create(options);
        if (!bed.ok()) _exit(3);
        std::ofstream(name_file(getppid())) << (*bed)->name() << " " << (*bed)->host(0).netns << " " << getpid();
        raise(SIGKILL);
      },
      ::testing::KilledBySignal(SIGKILL), "");
  std::string name, netns;
  pid_t child = 0;
  std::ifstream(name_file(getpid())) >> name >> netns >> child;
  ASSERT_FALSE(netns.empty());
  EXPECT_TRUE(WaitUntil([&] { return !NetnsExists(netns) && !Listed(name, child); }, seconds(20)))
      << "testbed " << name << " outlived its killed owner";
}

TEST(Testbed, WithoutNetworkCapabilitiesCreationFailsNamingWhy) {
  // Root without CAP_NET_ADMIN and CAP_SYS_ADMIN, as an unprivileged CI would be.
  CommandResult up = RunCommand(
      {"/usr/bin/setpriv", "--bounding-set=-net_admin,-sys_admin", Cli(), "up",
       "--hosts", "1"},
      seconds(60));
  EXPECT_EQ(up.exit_code, 1) << up.out << up.err;
  EXPECT_NE(up.err.find("CAP_NET_ADMIN"), std::string::npos) << up.err;
  auto all = ListTestbeds();
  ASSERT_TRUE(all.ok());
  for (const auto& record : *all) EXPECT_NE(record.owner_pid, getpid()) << record.json;  // nothing left behind
}

}  // namespace
}  // namespace herd::testbed
