#include "worker/daemon/ready_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace herd::worker {

absl::Status WriteReadyFile(const std::string& path, const std::string& worker_id,
                            const std::string& metrics_address) {
  nlohmann::json document = {{"worker_id", worker_id}, {"metrics", metrics_address}};
  std::string temp_path = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(temp_path, std::ios::trunc);
    out << document.dump() << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", temp_path));
  }
  if (std::rename(temp_path.c_str(), path.c_str()) != 0) {
    std::remove(temp_path.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", temp_path, " to ", path));
  }
  return absl::OkStatus();
}

std::string AdvertisedMetricsAddress(const std::string& listen, int port) {
  size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "*") host = "127.0.0.1";
  return absl::StrCat(host, ":", port);
}

}  // namespace herd::worker
