#include "tests/harness/testbed_cluster.h"

namespace herd::testing {

ClusterOptions ClusterOnTestbed(const testbed::Testbed& bed) {
  ClusterOptions options;
  options.workers = static_cast<int>(bed.hosts().size());
  options.coordinator_host = bed.root_address();
  for (const auto& host : bed.hosts()) options.worker_hosts.push_back({host.address, bed.ExecPrefix(host.index)});
  return options;
}

}  // namespace herd::testing
