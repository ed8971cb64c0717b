// Small facts about the machine a benchmark ran on, recorded next to its
// figures: these runs share a small machine, so load matters to reading them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace herd::bench {

// {"cpus":N,"loadavg_1m":X}
nlohmann::json MachineSnapshot();

// A fresh directory under $TEST_TMPDIR or /tmp; "" on failure.
std::string MakeTempDir(const std::string& tag);

}  // namespace herd::bench
