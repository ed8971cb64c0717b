// Blocking on a wait that holds no thread (join board, KV store), for
// in-process callers and tests; gRPC calls wait as callbacks instead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace herd::coordinator {

// `start(done)` begins a wait and returns its id; `done` gets the answer
// once, perhaps before `start` returns. Blocks until then, calling
// `cancel(id)` once `cancelled` says so (asked every `poll`).
template <typename T>
absl::StatusOr<T> AwaitAnswer(absl::FunctionRef<uint64_t(absl::AnyInvocable<void(absl::StatusOr<T>)>)> start,
                              absl::FunctionRef<void(uint64_t)> cancel, absl::Duration poll,
                              const std::function<bool()>& cancelled) {
  // Shared with `done`, which the waits' owner may destroy after this returns.
  struct Answer {
    absl::Mutex mu;
    std::optional<absl::StatusOr<T>> result ABSL_GUARDED_BY(mu);
  };
  auto answer = std::make_shared<Answer>();
  const uint64_t id = start([answer](absl::StatusOr<T> result) {
    absl::MutexLock lock(&answer->mu);
    answer->result = std::move(result);
  });
  Answer* const shared = answer.get();
  auto answered = [shared]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) { return shared->result.has_value(); };
  absl::MutexLock lock(&shared->mu);
  while (!answered()) {
    if (cancelled) {
      shared->mu.Unlock();
      if (cancelled()) cancel(id);  // answers CANCELLED unless the answer is on its way
      shared->mu.Lock();
    }
    shared->mu.AwaitWithTimeout(absl::Condition(&answered), poll);
  }
  return *std::move(shared->result);
}

}  // namespace herd::coordinator
