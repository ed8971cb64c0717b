// Turns the rank processes' samples into the figures the all-reduce benchmark
// reports: time per op, algorithm and bus bandwidth, and the ratios its
// targets are stated in.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

namespace herd::bench {

// `ranks` holds each rank's result file (see RunAllreduceRank); cases some
// rank did not finish are left out. Returns
// {"ranks":N,"sizes":[{"bytes":B,"VARIANT":{"us","algbw_gbps","busbw_gbps",
// "best_busbw_gbps","cpu_ms","cores_busy","iterations","correct"},...}]}. An all-reduce sample is
// the slowest rank's time in that iteration; the figure is the median sample.
// The pump's "busbw" is its plain bytes/s: the ceiling busbw is compared to.
nlohmann::json SummarizeWorld(int world, const std::vector<nlohmann::json>& ranks);

// A fixed-width table of one world's summary.
void PrintWorldTable(const nlohmann::json& world, std::FILE* out);

// The headline at one size: herd, the faster direct Gloo call and the pump,
// with herd/pump and herd/gloo; empty when the size was not run.
nlohmann::json Headline(const nlohmann::json& world, size_t bytes);

}  // namespace herd::bench
