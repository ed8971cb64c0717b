// What a data-plane socket's TCP path looks like, and the one lever a
// process has over its congestion control.
//
// A round of parameter averaging is a burst on connections that were idle
// for many steps. With a loss-based congestion control (cubic, reno) and
// the kernel's default tcp_slow_start_after_idle, each such burst restarts
// from the initial window, and on a long link that costs several round
// trips. BBR paces at its estimate of the path's rate and skips that
// restart. A pod cannot change the machine's sysctls, but a socket may
// choose its own congestion control (TCP_CONGESTION) among those the
// kernel allows.
#pragma once

#include <cstdint>
#include <string>

namespace herd {

struct TcpPath {
  int64_t window_bytes = 0;  // congestion window x MSS; 0 when unknown
  double rtt_seconds = 0;    // smoothed RTT
  double rto_seconds = 0;    // retransmission timeout (idle longer than it: slow start again)
};

// TCP_INFO of a connected socket (one getsockopt: collectives read it as
// they start); zero where the kernel does not say.
TcpPath ReadTcpPath(int fd);

// Sets the socket's congestion control to `wanted` (e.g. "bbr"). Returns
// the one it uses afterwards, with `note` saying why it is not `wanted`
// (not loaded, or not allowed for this process) where it is not.
std::string UseCongestionControl(int fd, const std::string& wanted, std::string* note);

}  // namespace herd
