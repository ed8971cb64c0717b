// Compares herd's Gloo communicator with calling Gloo's ring all-reduce
// directly, on the same machine, ranks as threads over loopback TCP.
//   bazel run -c opt //worker/comm:gloo_allreduce_bench -- [world] [iterations]
// Prints one line per buffer size: KiB, herd ms/op, direct ms/op, ratio.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "worker/comm/gloo_communicator.h"
#include "worker/comm/gloo_store_adapter.h"
#include "worker/comm/in_memory_store.h"

namespace herd {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void Run(int world, int iterations) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::unique_ptr<Communicator>> comms(world);
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> direct(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.rank = rank;
      options.size = world;
      options.key_prefix = "herd/";
      comms[rank] = std::move(CreateGlooCommunicator(options, store).value());
      GlooStoreAdapter adapter(store, "direct/", options.timeout);
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      direct[rank] = std::make_shared<gloo::rendezvous::Context>(rank, world);
      direct[rank]->connectFullMesh(adapter, device);
    });
  }
  for (auto& t : threads) t.join();

  std::printf("%10s %12s %12s %8s\n", "KiB", "herd_ms", "direct_ms", "ratio");
  for (size_t kib : {1, 64, 1024, 4096, 16384, 65536}) {
    const size_t count = kib * 1024 / sizeof(float);
    double herd_s = 0, direct_s = 0;
    threads.clear();
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        std::vector<float> data(count, 1.0f);
        auto herd_op = [&](int) { comms[rank]->AllReduce(data.data(), count, DataType::kFloat32).IgnoreError(); };
        auto direct_op = [&](int i) {
          gloo::AllreduceOptions options(direct[rank]);
          options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          options.setOutput(data.data(), count);
          options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          options.setTag(static_cast<uint32_t>(i));
          gloo::allreduce(options);
        };
        // Warm both paths, then alternate rounds so machine noise hits both alike.
        herd_op(0);
        direct_op(0);
        double herd_elapsed = 0, direct_elapsed = 0;
        for (int round = 0; round < 4; ++round) {
          comms[rank]->Barrier().IgnoreError();
          auto start = Clock::now();
          for (int i = 0; i < iterations; ++i) herd_op(i);
          herd_elapsed += Seconds(Clock::now() - start);
          comms[rank]->Barrier().IgnoreError();
          start = Clock::now();
          for (int i = 0; i < iterations; ++i) direct_op(i + 1);
          direct_elapsed += Seconds(Clock::now() - start);
        }
        if (rank == 0) {
          herd_s = herd_elapsed;
          direct_s = direct_elapsed;
        }
      });
    }
    for (auto& t : threads) t.join();
    std::printf("%10zu %12.3f %12.3f %8.3f\n", kib, 1e3 * herd_s / (4 * iterations), 1e3 * direct_s / (4 * iterations),
                herd_s / direct_s);
  }
}

}  // namespace
}  // namespace herd

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  herd::Run(world, iterations);
  return 0;
}
