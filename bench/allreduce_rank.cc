#include "bench/allreduce_rank.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "bench/file_store.h"
#include "bench/gloo_direct.h"
#include "bench/tcp_pump.h"
#include "worker/comm/float16.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/shm_allreduce.h"
#include "worker/comm/tcp_mesh_communicator.h"

namespace herd::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// User + system time of every thread of this process (Gloo's I/O threads included).
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// One timed batch of `reps` ops of one variant; returns seconds per op
// (0 on ranks that take no part, i.e. the pump's idle ranks).
using Batch = std::function<absl::StatusOr<double>(size_t count, int reps)>;

struct Rank {
  int world = 0;
  int rank = 0;
  std::unique_ptr<Communicator> herd;
  std::unique_ptr<Communicator> herd_shm;  // in front of `herd`
  std::unique_ptr<Communicator> herd_tcp;  // herd's own transport; only when asked for
  std::shared_ptr<void> shm_buffer;        // in its in-place area
  std::unique_ptr<DirectGloo> direct;
  std::unique_ptr<TcpPump> pump;
  std::vector<float> buffer;

  float* BufferFor(const std::string& variant) {
    return variant == kHerdShm ? static_cast<float*>(shm_buffer.get()) : buffer.data();
  }
};

absl::StatusOr<double> TimeOps(int reps, const std::function<absl::Status()>& op) {
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) {
    if (auto status = op(); !status.ok()) return status;
  }
  return SecondsSince(start) / reps;
}

Batch BatchOf(const std::string& variant, Rank& r, const AllreduceCaseOptions& options) {
  float* data = r.BufferFor(variant);
  if (variant == kPump) {
    return [&r, data](size_t count, int reps) -> absl::StatusOr<double> {
      auto seconds = r.pump->Run(reinterpret_cast<char*>(data), count * sizeof(float), reps);
      if (!seconds.ok()) return seconds.status();
      return *seconds / reps;
    };
  }
  if (variant == kHerd || variant == kHerdShm || variant == kHerdTcp) {
    Communicator* comm = variant == kHerd ? r.herd.get() : variant == kHerdShm ? r.herd_shm.get() : r.herd_tcp.get();
    return [comm, data](size_t count, int reps) {
      return TimeOps(reps, [&] { return comm->AllReduce(data, count, DataType::kFloat32); });
    };
  }
  if (variant == kHerdF16 || variant == kHerdTcpF16) {
    Communicator* comm = variant == kHerdF16 ? r.herd.get() : r.herd_tcp.get();
    return [comm, data](size_t count, int reps) {
      return TimeOps(reps, [&] { return comm->AllReduce(data, 2 * count, DataType::kFloat16); });
    };
  }
  if (variant == kGloo || variant.rfind(kGlooSegmentPrefix, 0) == 0) {
    // "gloo_ring@BYTES": the direct ring with that max segment, for sweeps.
    const size_t segment =
        variant == kGloo ? options.gloo_segment_bytes : std::stoull(variant.substr(sizeof(kGlooSegmentPrefix) - 1));
    return [&r, data, segment](size_t count, int reps) {
      return TimeOps(reps, [&] { return r.direct->Ring(data, count, segment); });
    };
  }
  if (variant.rfind(kGlooStripedPrefix, 0) == 0) {
    // "gloo_ring_x<K>[@BYTES]": K rings at once on K connections per peer.
    const std::string spec = variant.substr(sizeof(kGlooStripedPrefix) - 1);
    const int stripes = std::stoi(spec);
    const size_t at = spec.find('@');
    const size_t segment = at == std::string::npos ? 0 : std::stoull(spec.substr(at + 1));
    return [&r, data, stripes, segment](size_t count, int reps) {
      return TimeOps(reps, [&] { return r.direct->StripedRing(data, count, stripes, segment); });
    };
  }
  return
      [&r, data](size_t count, int reps) { return TimeOps(reps, [&] { return r.direct->RingChunked(data, count); }); };
}

// One all-reduce of (rank + 1) everywhere must give world*(world+1)/2 in
// every element; checked on a spread of elements.
absl::StatusOr<bool> CheckSum(Rank& r, float* buffer, const Batch& batch, size_t count, bool half) {
  if (half) {
    auto* halves = reinterpret_cast<uint16_t*>(buffer);
    std::fill(halves, halves + 2 * count, FloatToFloat16(static_cast<float>(r.rank + 1)));
    if (auto seconds = batch(count, 1); !seconds.ok()) return seconds.status();
    const uint16_t want = FloatToFloat16(r.world * (r.world + 1) / 2.0f);
    const bool ok = std::count(halves, halves + 2 * count, want) == static_cast<long>(2 * count);
    std::fill(buffer, buffer + count, 0.0f);
    return ok;
  }
  std::fill(buffer, buffer + count, static_cast<float>(r.rank + 1));
  if (auto seconds = batch(count, 1); !seconds.ok()) return seconds.status();
  const float want = r.world * (r.world + 1) / 2.0f;
  bool ok = true;
  for (size_t i = 0; i < count; i += std::max<size_t>(1, count / 97)) ok = ok && buffer[i] == want;
  ok = ok && buffer[count - 1] == want;
  std::fill(buffer, buffer + count, 0.0f);  // zeros stay zeros: no overflow later
  return ok;
}

absl::Status ConnectShm(Rank& r, const AllreduceCaseOptions& options, std::shared_ptr<RendezvousStore> store) {
  const size_t max_bytes = *std::max_element(options.sizes.begin(), options.sizes.end());
  ShmAllReduceOptions shm;
  shm.rank = r.rank;
  shm.size = r.world;
  shm.slot_bytes = max_bytes;
  shm.in_place_bytes = max_bytes;
  shm.timeout = options.timeout;
  shm.key_prefix = "shm/";
  auto created = CreateShmAllReduce(shm, r.herd.get(), store);
  if (!created.ok()) return created.status();
  r.herd_shm = *std::move(created);
  r.shm_buffer = r.herd_shm->AllocateAllReduceBuffer(max_bytes);
  if (r.shm_buffer == nullptr) return absl::InternalError("the shared-memory communicator gave no buffer");
  std::fill_n(static_cast<float*>(r.shm_buffer.get()), max_bytes / sizeof(float), 0.0f);  // touches every page
  return absl::OkStatus();
}

absl::Status Connect(Rank& r, const AllreduceCaseOptions& options, const std::string& store_dir) {
  auto store = std::make_shared<FileStore>(store_dir);
  GlooOptions gloo;
  gloo.rank = r.rank;
  gloo.size = r.world;
  gloo.timeout = options.timeout;
  gloo.key_prefix = "herd/";
  auto herd = CreateGlooCommunicator(gloo, store);
  if (!herd.ok()) return herd.status();
  r.herd = *std::move(herd);
  if (std::find(options.variants.begin(), options.variants.end(), kHerdShm) != options.variants.end()) {
    if (auto status = ConnectShm(r, options, store); !status.ok()) return status;
  }
  const auto asked = [&](const char* variant) {
    return std::find(options.variants.begin(), options.variants.end(), variant) != options.variants.end();
  };
  if (asked(kHerdTcp) || asked(kHerdTcpF16)) {
    TcpMeshOptions tcp;
    tcp.mesh.key_prefix = "tcp/";
    tcp.mesh.rank = r.rank;
    tcp.mesh.world_size = r.world;
    tcp.mesh.generation = 1;
    tcp.mesh.listen_host = "127.0.0.1";
    tcp.mesh.advertise_host = "127.0.0.1";
    tcp.mesh.timeout = options.timeout;
    tcp.timeout = options.timeout;
    auto created = CreateTcpMeshCommunicator(*store, tcp);
    if (!created.ok()) return created.status();
    r.herd_tcp = *std::move(created);
  }
  int stripes = 1;
  for (const std::string& variant : options.variants) {
    if (variant.rfind(kGlooStripedPrefix, 0) == 0) {
      stripes = std::max(stripes, std::stoi(variant.substr(sizeof(kGlooStripedPrefix) - 1)));
    }
  }
  auto direct = DirectGloo::Connect(r.rank, r.world, store, "direct/", options.timeout, stripes);
  if (!direct.ok()) return direct.status();
  r.direct = *std::move(direct);
  auto pump = TcpPump::Connect(r.rank, *store, "pump/port", options.timeout);
  if (!pump.ok()) return pump.status();
  r.pump = std::make_unique<TcpPump>(*std::move(pump));
  return absl::OkStatus();
}

}  // namespace

int BatchFor(const AllreduceCaseOptions& options, size_t bytes) {
  const size_t by_bytes = (options.batch_bytes + bytes - 1) / std::max<size_t>(bytes, 1);
  return static_cast<int>(std::clamp<size_t>(by_bytes, 1, static_cast<size_t>(std::max(options.max_batch, 1))));
}

absl::Status RunAllreduceRank(const AllreduceCaseOptions& options, int world, int rank, const std::string& store_dir,
                              const std::string& result_path) {
  Rank r;
  r.world = world;
  r.rank = rank;
  if (auto status = Connect(r, options, store_dir); !status.ok()) return status;
  const size_t max_bytes = *std::max_element(options.sizes.begin(), options.sizes.end());
  r.buffer.assign(max_bytes / sizeof(float), 0.0f);  // touches every page before any timing

  nlohmann::json cases = nlohmann::json::array();
  // Rewritten after every size, so a run that fails later keeps what it measured.
  auto save = [&]() -> absl::Status {
    return WriteFileAtomically(result_path, nlohmann::json{{"rank", rank}, {"cases", cases}}.dump() + "\n");
  };
  for (size_t bytes : options.sizes) {
    const size_t count = bytes / sizeof(float);
    const int reps = BatchFor(options, bytes);
    std::map<std::string, Batch> batches;
    std::map<std::string, bool> correct;
    double slowest_batch = 0;
    for (const std::string& variant : options.variants) {
      batches[variant] = BatchOf(variant, r, options);
      if (variant == kPump) {
        correct[variant] = true;
      } else {
        auto ok = CheckSum(r, r.BufferFor(variant), batches[variant], count,
                           variant == kHerdF16 || variant == kHerdTcpF16);
        if (!ok.ok()) return ok.status();
        correct[variant] = *ok;
      }
      for (int i = 0; i < options.warmup; ++i) {
        if (auto status = r.herd->Barrier(); !status.ok()) return status;
        const auto start = Clock::now();
        if (auto seconds = batches[variant](count, reps); !seconds.ok()) return seconds.status();
        slowest_batch = std::max(slowest_batch, SecondsSince(start));
      }
    }
    // Rank 0 sizes the run from its warmup so huge messages fit the budget;
    // every rank must loop the same number of times.
    int64_t iterations = options.iterations;
    if (rank == 0 && slowest_batch > 0) {
      iterations = std::clamp<int64_t>(static_cast<int64_t>(options.max_case_seconds / slowest_batch),
                                       options.min_iterations, options.iterations);
    }
    if (auto status = r.herd->Broadcast(&iterations, sizeof(iterations), 0); !status.ok()) return status;
    if (rank == 0) {
      std::fprintf(stderr, "[%d ranks] %zu bytes: %lld iterations of %d op(s) per variant\n", world, bytes,
                   static_cast<long long>(iterations), reps);
    }

    std::map<std::string, std::vector<double>> seconds;
    std::map<std::string, std::vector<double>> cpu;
    // Variants take turns within each iteration, so a burst of load from the
    // rest of the machine hits them alike rather than one of them.
    for (int64_t i = 0; i < iterations; ++i) {
      for (const std::string& variant : options.variants) {
        if (auto status = r.herd->Barrier(); !status.ok()) return status;
        const double cpu_before = ProcessCpuSeconds();
        auto per_op = batches[variant](count, reps);
        if (!per_op.ok()) return per_op.status();
        cpu[variant].push_back((ProcessCpuSeconds() - cpu_before) / reps);
        if (variant != kPump || rank == 0) seconds[variant].push_back(*per_op);
      }
    }
    for (const std::string& variant : options.variants) {
      cases.push_back({{"variant", variant},
                       {"bytes", bytes},
                       {"reps", reps},
                       {"correct", correct[variant]},
                       {"seconds", seconds[variant]},
                       {"cpu_seconds", cpu[variant]}});
    }
    if (auto status = save(); !status.ok()) return status;
  }
  // Gloo's ring-chunked ends with a barrier among neighbours only: without
  // this, a rank could exit (closing its sockets) while a peer still reads.
  return r.herd->Barrier();
}

}  // namespace herd::bench
