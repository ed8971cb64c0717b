// What a trainer does with each data-plane connection its TCP mesh listener
// refused: one `audit:` log line with the peer's address, the
// reason and the generation, and a count in
// herd_data_plane_refused_connections_total{reason, peer}. A refusal is
// outside noise: it never fails or re-forms the generation.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <string>

#include "worker/comm/tcp_mesh_listener.h"

namespace herd {

// "1.2.3.4:567" -> "1.2.3.4", "[::1]:80" -> "::1": the metric's peer label
// names the host, so a scanner's ever-new source ports add no series.
std::string PeerHost(const std::string& address);

// "audit: data-plane connection from P refused (R): D; generation G, rank K"
std::string DataPlaneAuditLine(const RejectedConnection& rejected, int64_t generation, int rank);

class DataPlaneAudit {
 public:
  // Labels job, worker and rank on every series (as the trainer's other metrics).
  DataPlaneAudit(prometheus::Registry& registry, const std::string& job, const std::string& worker);

  // Logs and counts one refusal; called from the listener's thread.
  void Record(const RejectedConnection& rejected, int64_t generation, int rank);

 private:
  prometheus::Family<prometheus::Counter>& refused_;
  const std::string job_;
  const std::string worker_;
};

}  // namespace herd
