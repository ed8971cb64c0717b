// herd-testbed-relay: the delaying relay of one testbed host's link (relay.h).
// The testbed starts it inside the host's relay namespace and kills it at
// teardown; by hand it is only useful for debugging.
#include <sched.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>

#include "tests/testbed/relay.h"

int main(int argc, char** argv) {
  CLI::App app("herd-testbed-relay: holds every frame between two interfaces for a fixed delay", "herd-testbed-relay");
  herd::testbed::RelayOptions options;
  app.add_option("--host-side", options.host_side, "Interface towards the host")->required();
  app.add_option("--bridge-side", options.bridge_side, "Interface towards the bridge")->required();
  // Microseconds: a site's link holds half of an odd number of ms.
  app.add_option("--delay-us", options.delay_us, "Delay in each direction, microseconds (0..10000000)")->required();
  app.add_option("--stats", options.stats_path, "JSON file of counters, rewritten once a second when they change");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // A link's delay does not depend on the host's load; the relay's would,
  // by tens of ms on a machine busy with the training it carries. Realtime
  // priority (FIFO 1, the lowest) lets it release each frame on time; it
  // blocks in poll between frames, and the kernel's realtime throttling
  // bounds it anyway. Without the privilege it runs as before.
  sched_param realtime{};
  realtime.sched_priority = 1;
  if (sched_setscheduler(0, SCHED_FIFO, &realtime) != 0) {
    std::cerr << "herd-testbed-relay: no realtime priority (" << std::strerror(errno)
              << "); delays may stretch on a loaded machine\n";
  }
  absl::Status status = herd::testbed::RunRelay(options);
  if (!status.ok()) {
    std::cerr << status.message() << "\n";
    return 1;
  }
  return 0;
}
