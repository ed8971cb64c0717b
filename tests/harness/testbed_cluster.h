// A LocalCluster laid out on a testbed: the coordinator on the bed's root
// address, one worker daemon on each host, run inside that host's
// namespace. Tests add their own options (labels, leases) on top.
#pragma once

#include "tests/harness/local_cluster.h"
#include "tests/testbed/testbed.h"

namespace herd::testing {

ClusterOptions ClusterOnTestbed(const testbed::Testbed& bed);

}  // namespace herd::testing
