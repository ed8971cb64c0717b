#include "worker/daemon/ready_file.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace herd::worker {

absl::Status WriteReadyFile(const std::string& path, const std::string& worker_id,
                            const std::string& metrics_address) {
  nlohmann::json document = {{"worker_id", worker_id}, {"metrics", metrics_address}};
  return WriteFileAtomically(path, document.dump() + "\n");
}

std::string AdvertisedMetricsAddress(const std::string& listen, int port) {
  size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "*") host = "127.0.0.1";
  return absl::StrCat(host, ":", port);
}

}  // namespace herd::worker
