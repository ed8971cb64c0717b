#include "bench/allreduce_report.h"

#include <algorithm>
#include <map>
#include <string>

#include "bench/allreduce_rank.h"
#include "bench/stats.h"

namespace herd::bench {
namespace {

constexpr double kGB = 1e9;

std::string SizeName(size_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

const nlohmann::json* Find(const nlohmann::json& size, const char* variant) {
  return size.contains(variant) ? &size.at(variant) : nullptr;
}

}  // namespace

nlohmann::json SummarizeWorld(int world, const std::vector<nlohmann::json>& ranks) {
  // (bytes, variant) -> per-rank sample lists.
  std::map<std::pair<size_t, std::string>, std::vector<std::vector<double>>> samples;
  std::map<std::pair<size_t, std::string>, bool> correct;
  std::map<std::pair<size_t, std::string>, std::vector<double>> cpu;  // all ranks' CPU per op, by iteration
  std::map<std::pair<size_t, std::string>, int> reported;             // by how many ranks
  for (const nlohmann::json& rank : ranks) {
    for (const nlohmann::json& c : rank.at("cases")) {
      auto key = std::make_pair(c.at("bytes").get<size_t>(), c.at("variant").get<std::string>());
      ++reported[key];
      auto seconds = c.at("seconds").get<std::vector<double>>();
      if (!seconds.empty()) samples[key].push_back(std::move(seconds));
      auto rank_cpu = c.value("cpu_seconds", std::vector<double>{});
      std::vector<double>& total = cpu[key];
      total.resize(std::max(total.size(), rank_cpu.size()), 0.0);
      for (size_t i = 0; i < rank_cpu.size(); ++i) total[i] += rank_cpu[i];
      auto it = correct.find(key);
      correct[key] = (it == correct.end() || it->second) && c.at("correct").get<bool>();
    }
  }
  const double bus_factor = 2.0 * (world - 1) / world;
  std::map<size_t, nlohmann::json> sizes;
  for (const auto& [key, per_rank] : samples) {
    const auto& [bytes, variant] = key;
    if (reported[key] < world) continue;  // a rank failed before finishing this case
    std::vector<double> slowest(per_rank.front().size(), 0.0);
    for (const auto& list : per_rank) {
      for (size_t i = 0; i < slowest.size() && i < list.size(); ++i) slowest[i] = std::max(slowest[i], list[i]);
    }
    const double median = Median(slowest);
    const double best = *std::min_element(slowest.begin(), slowest.end());
    const double factor = variant == kPump ? 1.0 : bus_factor;
    nlohmann::json figures = {{"us", median * 1e6},
                              {"algbw_gbps", bytes / median / kGB},
                              {"busbw_gbps", bytes / median / kGB * factor},
                              {"best_busbw_gbps", bytes / best / kGB * factor},
                              {"cpu_ms", Median(cpu[key]) * 1e3},  // all ranks together
                              {"cores_busy", Median(cpu[key]) / median},
                              {"iterations", slowest.size()},
                              {"correct", correct[key]}};
    sizes[bytes]["bytes"] = bytes;
    sizes[bytes][variant] = figures;
  }
  nlohmann::json result = {{"ranks", world}, {"sizes", nlohmann::json::array()}};
  for (auto& [bytes, size] : sizes) result["sizes"].push_back(size);
  return result;
}

void PrintWorldTable(const nlohmann::json& world, std::FILE* out) {
  std::fprintf(out,
               "\nall-reduce, %d ranks (float32; median of iterations; busbw = algbw * 2(n-1)/n; GB/s = 1e9 B/s)\n",
               world.at("ranks").get<int>());
  std::fprintf(out, "%9s | %9s | %10s %8s %8s | %10s %8s | %10s %8s | %9s %9s\n", "size", "pump GB/s", "herd us",
               "algbw", "busbw", "gloo us", "busbw", "chunked us", "busbw", "herd/pump", "herd/gloo");
  for (const nlohmann::json& size : world.at("sizes")) {
    auto us = [&](const char* v) { return Find(size, v) ? Find(size, v)->at("us").get<double>() : 0.0; };
    auto bus = [&](const char* v) { return Find(size, v) ? Find(size, v)->at("busbw_gbps").get<double>() : 0.0; };
    auto alg = [&](const char* v) { return Find(size, v) ? Find(size, v)->at("algbw_gbps").get<double>() : 0.0; };
    const double gloo = std::max(bus(kGloo), bus(kGlooChunked));
    std::fprintf(out, "%9s | %9.3f | %10.1f %8.3f %8.3f | %10.1f %8.3f | %10.1f %8.3f | %9.2f %9.2f\n",
                 SizeName(size.at("bytes")).c_str(), bus(kPump), us(kHerd), alg(kHerd), bus(kHerd), us(kGloo),
                 bus(kGloo), us(kGlooChunked), bus(kGlooChunked), bus(kPump) > 0 ? bus(kHerd) / bus(kPump) : 0.0,
                 gloo > 0 ? bus(kHerd) / gloo : 0.0);
  }
  // Whether a variant is bound by CPU: on this machine's cores, a variant
  // that keeps them all busy can only go faster by spending less CPU per byte.
  std::fprintf(out, "CPU per op, all ranks (ms) and cores kept busy:\n%9s | %16s | %16s | %16s | %16s\n", "size",
               "pump", "herd", "gloo", "chunked");
  for (const nlohmann::json& size : world.at("sizes")) {
    std::fprintf(out, "%9s", SizeName(size.at("bytes")).c_str());
    for (const char* v : {kPump, kHerd, kGloo, kGlooChunked}) {
      const nlohmann::json* f = Find(size, v);
      std::fprintf(out, " | %9.2f %6.2f", f ? f->at("cpu_ms").get<double>() : 0.0,
                   f ? f->at("cores_busy").get<double>() : 0.0);
    }
    std::fprintf(out, "\n");
  }
  // Variants outside the table (segment sweeps), one line each.
  for (const nlohmann::json& size : world.at("sizes")) {
    for (const auto& [name, figures] : size.items()) {
      if (name == "bytes" || name == kPump || name == kHerd || name == kGloo || name == kGlooChunked) continue;
      std::fprintf(out, "%9s | %-24s %10.1f us  busbw %8.3f  cpu %8.2f ms  cores %5.2f\n",
                   SizeName(size.at("bytes")).c_str(), name.c_str(), figures.at("us").get<double>(),
                   figures.at("busbw_gbps").get<double>(), figures.at("cpu_ms").get<double>(),
                   figures.at("cores_busy").get<double>());
    }
  }
  for (const nlohmann::json& size : world.at("sizes")) {
    for (const char* v : {kHerd, kGloo, kGlooChunked, kHerdShm}) {
      if (Find(size, v) && !Find(size, v)->at("correct").get<bool>()) {
        std::fprintf(out, "WRONG RESULT: %s at %s\n", v, SizeName(size.at("bytes")).c_str());
      }
    }
  }
}

nlohmann::json Headline(const nlohmann::json& world, size_t bytes) {
  for (const nlohmann::json& size : world.at("sizes")) {
    if (size.at("bytes").get<size_t>() != bytes) continue;
    auto bus = [&](const char* v) { return Find(size, v) ? Find(size, v)->at("busbw_gbps").get<double>() : 0.0; };
    const double herd = bus(kHerd);
    const double pump = bus(kPump);
    const double gloo = std::max(bus(kGloo), bus(kGlooChunked));
    return {{"ranks", world.at("ranks")},
            {"bytes", bytes},
            {"herd_busbw_gbps", herd},
            {"gloo_busbw_gbps", gloo},
            {"gloo_ring_busbw_gbps", bus(kGloo)},
            {"gloo_ring_chunked_busbw_gbps", bus(kGlooChunked)},
            {"pump_gbps", pump},
            {"herd_over_pump", pump > 0 ? herd / pump : 0.0},
            {"herd_over_gloo", gloo > 0 ? herd / gloo : 0.0},
            // Not a target variant: the targets are about the TCP transport
            // every multi-host job uses; this is what ranks on one host get.
            {"herd_shm_busbw_gbps", bus(kHerdShm)},
            {"herd_shm_over_pump", pump > 0 ? bus(kHerdShm) / pump : 0.0}};
  }
  return nlohmann::json::object();
}

}  // namespace herd::bench
