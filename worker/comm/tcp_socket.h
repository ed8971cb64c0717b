// Small socket helpers shared by the TCP mesh's listener and connector: address
// formatting, blocking mode, and reads/writes bounded by a deadline.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/unique_fd.h"

namespace herd {

using SteadyTime = std::chrono::steady_clock::time_point;

// "1.2.3.4:567" or "[::1]:567".
std::string FormatSocketAddress(const sockaddr* address, socklen_t length);
// The other end / our end of a connected socket, formatted as above.
std::string PeerAddressOf(int fd);
std::string LocalAddressOf(int fd);

absl::Status SetNonBlocking(int fd, bool non_blocking);
// Data-plane sockets carry small latency-bound messages.
void SetNoDelay(int fd);

// A listening TCP socket on host:port (host "" means every interface;
// port 0 picks a free one), non-blocking, close-on-exec.
absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port);
int LocalPortOf(int fd);

// Milliseconds until `deadline` for poll(): 0 when past, rounded up so a
// wait does not end just before it.
int PollMillisUntil(SteadyTime deadline);

// How a bounded read ended.
enum class ReadEnd { kComplete, kClosed, kTimeout, kError };

// Reads exactly `bytes` more bytes into `out` (never more: what follows
// belongs to the caller) from a non-blocking socket, until `deadline`.
// `errno_out` receives the error of kError.
ReadEnd ReadExactly(int fd, size_t bytes, SteadyTime deadline, std::string* out, int* errno_out);

// Writes all of `data` to a non-blocking socket before `deadline`.
absl::Status WriteAll(int fd, const std::string& data, SteadyTime deadline);

}  // namespace herd
