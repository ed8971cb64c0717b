#include "coordinator/ready_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace herd::coordinator {

absl::Status WriteReadyFile(const std::string& path, const std::string& listen_address,
                            const std::string& metrics_address) {
  const nlohmann::json ready = {{"listen", listen_address}, {"metrics", metrics_address}};
  const std::string temporary = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << ready.dump() << "\n";
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ready file ", temporary));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", temporary, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace herd::coordinator
