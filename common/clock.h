// Injected time source. Coordinator decisions take "now" from a Clock so that
// tests drive time by hand instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace herd {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the Unix epoch (MonotonicClock: since an arbitrary zero).
  virtual double Now() const = 0;
};

class SystemClock : public Clock {
 public:
  double Now() const override {
    return std::chrono::duration<double>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// For deadlines: never jumps with the wall clock, but its zero is arbitrary,
// so only differences of its readings mean anything.
class MonotonicClock : public Clock {
 public:
  double Now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(double start = 1000.0) : now_(start) {}
  double Now() const override { return now_.load(); }
  void Advance(double seconds) { now_.store(now_.load() + seconds); }
  void Set(double now) { now_.store(now); }

 private:
  std::atomic<double> now_;
};

}  // namespace herd
