// Test helper: waits for a condition instead of sleeping a fixed time.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace herd::worker {

// Polls `condition` until it holds (true) or `timeout` passes (false).
inline bool WaitUntil(const std::function<bool()>& condition,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace herd::worker
