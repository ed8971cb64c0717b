// The transport's ceiling: bytes streamed one way through a plain loopback
// TCP socket between two processes, with nothing else going on. Gloo's TCP
// transport can at best approach this.
#pragma once

#include <chrono>
#include <cstddef>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd::bench {

class TcpPump {
 public:
  // Rank 0 listens on loopback and publishes its port under `key`; rank 1
  // connects. Other ranks get a pump that does nothing.
  static absl::StatusOr<TcpPump> Connect(int rank, RendezvousStore& store, const std::string& key,
                                         std::chrono::milliseconds timeout);
  TcpPump(TcpPump&& other) noexcept;
  ~TcpPump();

  // Streams `reps` times `bytes` bytes from `buffer` on rank 0 into `buffer`
  // on rank 1, which acknowledges the end with one byte. Rank 0 returns the
  // seconds from its first write to the acknowledgement; rank 1 returns 0.
  absl::StatusOr<double> Run(char* buffer, size_t bytes, int reps);

 private:
  TcpPump(int rank, int fd) : rank_(rank), fd_(fd) {}

  int rank_;
  int fd_;
};

}  // namespace herd::bench
