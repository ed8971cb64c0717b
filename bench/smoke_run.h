// For the benchmarks' smoke tests: run a benchmark binary with tiny settings
// and hand back the JSON line it ends with.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace herd::bench {

// Runs the binary at `package_path` (a runfile, e.g. "bench/allreduce_bench")
// with `args`; fails the current test unless it exits 0 and its last stdout
// line is a JSON object. Returns that object (empty on failure).
nlohmann::json RunBenchmark(const std::string& package_path, const std::vector<std::string>& args);

// Fails the current test unless `object[key]` is a number > 0.
void ExpectPositive(const nlohmann::json& object, const std::string& key, const std::string& where);

}  // namespace herd::bench
