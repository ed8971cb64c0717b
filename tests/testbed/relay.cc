#include "tests/testbed/relay.h"

#include <linux/if_packet.h>
#include <arpa/inet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

namespace herd::testbed {
namespace {

// Socket buffers large enough that a shaped link's own queue (tbf), not the
// socket, is what limits a burst.
constexpr int kSocketBuffer = 16 << 20;
// A frame with its virtio-net header: TCP's offloaded frames reach 64 KiB.
constexpr size_t kMaxFrame = 256 << 10;
// struct virtio_net_hdr (linux/virtio_net.h, which C++ cannot include):
// flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.
constexpr size_t kVnetHeaderBytes = 10;
// Frames read from one side before the other gets a turn.
constexpr int kReadBatch = 64;

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat("relay: ", what, ": ", std::strerror(errno)));
}

// A raw socket on `interface` that reads and writes frames with a virtio-net
// header and never sees the frames it sent.
absl::StatusOr<int> OpenLink(const std::string& interface) {
  const unsigned index = if_nametoindex(interface.c_str());
  if (index == 0) return absl::NotFoundError(absl::StrCat("relay: no interface ", interface));
  // Protocol 0 until bind: the socket receives nothing from other interfaces.
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket(AF_PACKET)");
  const int one = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0) return Errno("PACKET_VNET_HDR");
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0) {
    return Errno("PACKET_IGNORE_OUTGOING");
  }
  for (int option : {SO_RCVBUFFORCE, SO_SNDBUFFORCE}) {
    if (setsockopt(fd, SOL_SOCKET, option, &kSocketBuffer, sizeof(kSocketBuffer)) != 0) return Errno("socket buffer");
  }
  sockaddr_ll address{};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = static_cast<int>(index);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return Errno("bind to " + interface);
  }
  return fd;
}

struct Frame {
  int64_t due_ns;
  std::string bytes;  // virtio-net header and frame
};

struct Direction {
  const char* name;
  int in = -1;
  int out = -1;
  std::deque<Frame> queue;
  uint64_t queued_bytes = 0;
  bool blocked = false;  // `out` refused with EAGAIN: wait for POLLOUT
  RelayDirectionStats stats;
};

// Reads what `d.in` has (up to a batch), queued to leave at now + delay.
absl::Status ReadFrames(Direction& d, int64_t delay_ns, std::vector<char>& buffer) {
  for (int i = 0; i < kReadBatch; ++i) {
    sockaddr_ll from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n = recvfrom(d.in, buffer.data(), buffer.size(), MSG_TRUNC, reinterpret_cast<sockaddr*>(&from),
                               &from_len);
    if (n < 0) {
      // ENETDOWN: the link was cut (the error is reported once); it comes back.
      if (errno == EAGAIN || errno == EINTR || errno == ENETDOWN) return absl::OkStatus();
      return Errno(absl::StrCat("read (", d.name, ")"));
    }
    if (from.sll_pkttype == PACKET_OUTGOING) continue;
    // Counted as full too: a frame larger than the buffer (never seen: GSO
    // frames stop at 64 KiB).
    if (static_cast<size_t>(n) > buffer.size() || d.queued_bytes + n > kMaxQueuedBytes) {
      ++d.stats.dropped_full;
      continue;
    }
    d.queue.push_back(Frame{NowNs() + delay_ns, std::string(buffer.data(), n)});
    d.queued_bytes += n;
  }
  return absl::OkStatus();
}

// Writes the frames whose time has come, in order.
void WriteDue(Direction& d, int64_t now) {
  while (!d.queue.empty() && d.queue.front().due_ns <= now) {
    const Frame& frame = d.queue.front();
    if (send(d.out, frame.bytes.data(), frame.bytes.size(), 0) < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        d.blocked = true;
        return;
      }
      ++d.stats.dropped_write;  // link down, or its queue (tbf) full: the frame is lost, as on a wire
    } else {
      ++d.stats.frames;
      d.stats.bytes += frame.bytes.size() - kVnetHeaderBytes;
    }
    d.queued_bytes -= frame.bytes.size();
    d.queue.pop_front();
  }
  d.blocked = false;
}

void AddKernelDrops(Direction& d) {
  tpacket_stats counts{};
  socklen_t len = sizeof(counts);
  if (getsockopt(d.in, SOL_PACKET, PACKET_STATISTICS, &counts, &len) == 0) d.stats.dropped_kernel += counts.tp_drops;
}

nlohmann::json StatsJson(const Direction& d) {
  return {{"frames", d.stats.frames},
          {"bytes", d.stats.bytes},
          {"queued_frames", d.queue.size()},
          {"dropped_full", d.stats.dropped_full},
          {"dropped_write", d.stats.dropped_write},
          {"dropped_kernel", d.stats.dropped_kernel}};
}

void WriteStats(const RelayOptions& options, const Direction& to_bridge, const Direction& to_host) {
  if (options.stats_path.empty()) return;
  const nlohmann::json json = {{"pid", getpid()},
                               {"delay_us", options.delay_us},
                               {"delay_ms", options.delay_us / 1000.0},
                               {"from_host", StatsJson(to_bridge)},
                               {"to_host", StatsJson(to_host)}};
  const std::string temp = options.stats_path + ".tmp";
  if (FILE* f = std::fopen(temp.c_str(), "w"); f != nullptr) {
    const std::string text = json.dump() + "\n";
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) == 0 && written) std::rename(temp.c_str(), options.stats_path.c_str());
  }
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::Status RunRelay(const RelayOptions& options) {
  if (options.delay_us < 0 || options.delay_us > 10000000) {
    return absl::InvalidArgumentError(absl::StrCat("relay: delay_us ", options.delay_us, " is not in 0..10000000"));
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  if (sigprocmask(SIG_BLOCK, &stop, nullptr) != 0) return Errno("sigprocmask");
  Fd signals(signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  if (signals.get() < 0) return Errno("signalfd");
  auto host = OpenLink(options.host_side);
  if (!host.ok()) return host.status();
  Fd host_fd(*host);
  auto bridge = OpenLink(options.bridge_side);
  if (!bridge.ok()) return bridge.status();
  Fd bridge_fd(*bridge);
  Fd release(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  Fd tick(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (release.get() < 0 || tick.get() < 0) return Errno("timerfd_create");
  const itimerspec every_second{{1, 0}, {1, 0}};
  if (timerfd_settime(tick.get(), 0, &every_second, nullptr) != 0) return Errno("timerfd_settime");

  Direction to_bridge{"from host"}, to_host{"to host"};
  to_bridge.in = host_fd.get();
  to_bridge.out = bridge_fd.get();
  to_host.in = bridge_fd.get();
  to_host.out = host_fd.get();
  const int64_t delay_ns = options.delay_us * 1000;
  std::vector<char> buffer(kMaxFrame);
  WriteStats(options, to_bridge, to_host);  // also says: the relay is running
  std::string last_stats;

  while (true) {
    // Wake for input, for a blocked output to drain, for the next due frame.
    pollfd fds[5] = {{host_fd.get(), static_cast<short>(POLLIN | (to_host.blocked ? POLLOUT : 0)), 0},
                     {bridge_fd.get(), static_cast<short>(POLLIN | (to_bridge.blocked ? POLLOUT : 0)), 0},
                     {release.get(), POLLIN, 0},
                     {tick.get(), POLLIN, 0},
                     {signals.get(), POLLIN, 0}};
    int64_t next = 0;
    for (const Direction* d : {&to_bridge, &to_host}) {
      if (!d->blocked && !d->queue.empty() && (next == 0 || d->queue.front().due_ns < next)) {
        next = d->queue.front().due_ns;
      }
    }
    itimerspec at{};
    at.it_value = {static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
    if (timerfd_settime(release.get(), TFD_TIMER_ABSTIME, &at, nullptr) != 0) return Errno("timerfd_settime");
    if (poll(fds, 5, -1) < 0) {
      if (errno == EINTR) continue;
      return Errno("poll");
    }
    if (fds[4].revents & POLLIN) {
      WriteStats(options, to_bridge, to_host);
      return absl::OkStatus();
    }
    for (int i : {0, 1}) {
      if (fds[i].revents & (POLLERR | POLLNVAL)) {
        // A link that went down reports an error once; reading clears it.
        int error = 0;
        socklen_t len = sizeof(error);
        getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &error, &len);
      }
    }
    if (fds[0].revents & POLLIN) {
      if (auto s = ReadFrames(to_bridge, delay_ns, buffer); !s.ok()) return s;
    }
    if (fds[1].revents & POLLIN) {
      if (auto s = ReadFrames(to_host, delay_ns, buffer); !s.ok()) return s;
    }
    uint64_t expirations = 0;
    if (fds[2].revents & POLLIN) (void)!read(release.get(), &expirations, sizeof(expirations));
    const int64_t now = NowNs();
    WriteDue(to_bridge, now);
    WriteDue(to_host, now);
    if (fds[3].revents & POLLIN) {
      (void)!read(tick.get(), &expirations, sizeof(expirations));
      AddKernelDrops(to_bridge);
      AddKernelDrops(to_host);
      const std::string stats = StatsJson(to_bridge).dump() + StatsJson(to_host).dump();
      if (stats != last_stats) WriteStats(options, to_bridge, to_host);
      last_stats = stats;
    }
  }
}

}  // namespace herd::testbed
