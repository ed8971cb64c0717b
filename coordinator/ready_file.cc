#include "coordinator/ready_file.h"

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"

namespace herd::coordinator {

absl::Status WriteReadyFile(const std::string& path, const std::string& listen_address,
                            const std::string& metrics_address, bool leading) {
  const nlohmann::json ready = {{"listen", listen_address}, {"metrics", metrics_address}, {"leading", leading}};
  return WriteFileAtomically(path, ready.dump() + "\n");
}

}  // namespace herd::coordinator
