// The file a daemon writes once registered, so scripts and tests know it is
// up and where its metrics are served.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace herd::worker {

// Writes {"worker_id": ..., "metrics": ...} to `path` atomically: a reader
// sees either no file or the whole document.
absl::Status WriteReadyFile(const std::string& path, const std::string& worker_id,
                            const std::string& metrics_address);

// "host:port" for clients of a metrics server listening on `listen` (host:port)
// and bound to `port`; a wildcard host becomes 127.0.0.1.
std::string AdvertisedMetricsAddress(const std::string& listen, int port);

}  // namespace herd::worker
