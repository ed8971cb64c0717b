#include "worker/train/generation/data_plane_audit.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "worker/comm/tcp_mesh_handshake.h"

namespace herd {

std::string PeerHost(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close != std::string::npos) return address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || address.find(':') != colon) return address;  // no port, or bare IPv6
  return address.substr(0, colon);
}

std::string DataPlaneAuditLine(const RejectedConnection& rejected, int64_t generation, int rank) {
  return absl::StrCat(AuditLine(rejected), "; generation ", generation, ", rank ", rank);
}

DataPlaneAudit::DataPlaneAudit(prometheus::Registry& registry, const std::string& job, const std::string& worker)
    : refused_(prometheus::BuildCounter()
                   .Name("herd_data_plane_refused_connections_total")
                   .Help("Connections to this trainer's data-plane port that did not prove membership of the "
                         "generation and were closed (by reason and peer host); they never fail the job.")
                   .Register(registry)),
      job_(job),
      worker_(worker) {}

void DataPlaneAudit::Record(const RejectedConnection& rejected, int64_t generation, int rank) {
  LOG(WARNING) << DataPlaneAuditLine(rejected, generation, rank);
  refused_
      .Add({{"job", job_},
            {"worker", worker_},
            {"rank", absl::StrCat(rank)},
            {"reason", RejectReasonName(rejected.reason)},
            {"peer", PeerHost(rejected.peer)}})
      .Increment();
}

}  // namespace herd
