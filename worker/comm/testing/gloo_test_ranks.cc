#include "worker/comm/testing/gloo_test_ranks.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "worker/comm/gloo_communicator.h"
#include "worker/comm/in_memory_store.h"

namespace herd {

void RunGlooRanks(int world, const std::function<void(int, Communicator*)>& body) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = world;
      options.timeout = std::chrono::seconds(20);
      auto comm = CreateGlooCommunicator(options, store);
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(r, comm->get());
    });
  }
  for (auto& t : threads) t.join();
}

std::mutex& RankComputeMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace herd
