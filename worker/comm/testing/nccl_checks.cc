#include "worker/comm/testing/nccl_checks.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/bfloat16.h"
#include "worker/comm/testing/ending_store.h"
#include "worker/comm/in_memory_store.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/nccl_device.h"

namespace herd {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using Comms = std::vector<std::unique_ptr<Communicator>>;

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

NcclOptions OptionsFor(int rank, int world, milliseconds timeout) {
  NcclOptions options;
  options.rank = rank;
  options.size = world;
  options.device = rank;
  options.timeout = timeout;
  options.key_prefix = "check/";
  return options;
}

void DestroyTogether(Comms& comms);

// Setup is collective, so every rank gets its own thread.
absl::StatusOr<Comms> CreateWorld(int world, milliseconds timeout = milliseconds(30000)) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> results(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] { results[rank] = CreateNcclCommunicator(OptionsFor(rank, world, timeout), store); });
  }
  for (auto& thread : threads) thread.join();
  Comms comms;
  absl::Status failed;
  for (auto& result : results) {
    if (result.ok()) {
      comms.push_back(std::move(*result));
    } else if (failed.ok()) {
      failed = result.status();
    }
  }
  if (failed.ok()) return comms;
  DestroyTogether(comms);
  return failed;
}

// Runs body(rank, comm) on one thread per rank; the first error wins.
absl::Status OnEachRank(const Comms& comms, const std::function<absl::Status(int, Communicator&)>& body) {
  std::mutex mu;
  absl::Status first;
  std::vector<std::thread> threads;
  for (size_t rank = 0; rank < comms.size(); ++rank) {
    threads.emplace_back([&, rank] {
      absl::Status status = body(static_cast<int>(rank), *comms[rank]);
      std::lock_guard<std::mutex> lock(mu);
      if (first.ok() && !status.ok()) first = absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
    });
  }
  for (auto& thread : threads) thread.join();
  return first;
}

// Destroys the ranks concurrently, as separate processes would: NCCL's clean
// teardown waits for the other ranks on the host to tear down too.
void DestroyTogether(Comms& comms) {
  std::vector<std::thread> threads;
  for (auto& comm : comms) threads.emplace_back([&comm] { comm.reset(); });
  for (auto& thread : threads) thread.join();
  comms.clear();
}

absl::Status InWorld(int world, const std::function<absl::Status(int, Communicator&)>& body) {
  absl::StatusOr<Comms> comms = CreateWorld(world);
  if (!comms.ok()) return comms.status();
  const absl::Status status = OnEachRank(*comms, body);
  DestroyTogether(*comms);
  return status;
}

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

absl::Status ExpectCode(const absl::Status& status, absl::StatusCode code, const std::string& what) {
  if (status.code() == code) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": want ", absl::StatusCodeToString(code), ", got ", status.ToString()));
}

// Values are small integers so every type, bf16 included, sums exactly.
double ValueAt(int rank, size_t i) { return static_cast<double>(i % 13 + rank + 1); }

double SumAt(int world, size_t i) {
  double sum = 0;
  for (int rank = 0; rank < world; ++rank) sum += ValueAt(rank, i);
  return sum;
}

// IEEE half for the small non-negative integers above.
uint16_t HalfFromSmallInteger(double value) {
  if (value == 0) return 0;
  int exponent = 0;
  const double fraction = std::frexp(value, &exponent);  // value = fraction * 2^exponent, fraction in [0.5, 1)
  const auto mantissa = static_cast<uint16_t>(std::lround((fraction * 2 - 1) * 1024));
  return static_cast<uint16_t>(((exponent - 1 + 15) << 10) | mantissa);
}

double HalfToDouble(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  return (bits & 0x8000) ? -magnitude : magnitude;
}

void Encode(DataType type, double value, uint8_t* out) {
  switch (type) {
    case DataType::kFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(out, &v, sizeof(v));
      break;
    }
    case DataType::kFloat64:
      std::memcpy(out, &value, sizeof(value));
      break;
    case DataType::kInt64: {
      const auto v = static_cast<int64_t>(value);
      std::memcpy(out, &v, sizeof(v));
      break;
    }
    case DataType::kFloat16: {
      const uint16_t v = HalfFromSmallInteger(value);
      std::memcpy(out, &v, sizeof(v));
      break;
    }
    case DataType::kBFloat16: {
      const uint16_t v = FloatToBFloat16(static_cast<float>(value));
      std::memcpy(out, &v, sizeof(v));
      break;
    }
    case DataType::kUInt8:
      *out = static_cast<uint8_t>(value);
      break;
  }
}

double Decode(DataType type, const uint8_t* in) {
  switch (type) {
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, in, sizeof(v));
      return v;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, in, sizeof(v));
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, in, sizeof(v));
      return static_cast<double>(v);
    }
    case DataType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, in, sizeof(v));
      return HalfToDouble(v);
    }
    case DataType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, in, sizeof(v));
      return BFloat16ToFloat(v);
    }
    case DataType::kUInt8:
      return *in;
  }
  return NAN;
}

// A device buffer holding ValueAt(rank, i) + offset for i < count.
absl::StatusOr<DeviceBuffer> FilledBuffer(int rank, size_t count, DataType type, double offset = 0) {
  const size_t width = DataTypeSize(type);
  std::vector<uint8_t> host(count * width);
  for (size_t i = 0; i < count; ++i) Encode(type, ValueAt(rank, i) + offset, &host[i * width]);
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(rank, host.size());
  if (!buffer.ok()) return buffer.status();
  absl::Status copied = buffer->CopyFromHost(host.data(), host.size());
  if (!copied.ok()) return copied;
  return buffer;
}

// Checks the buffer now holds SumAt(world, i) + world * offset.
absl::Status ExpectSums(const DeviceBuffer& buffer, int world, size_t count, DataType type, double offset = 0) {
  const size_t width = DataTypeSize(type);
  std::vector<uint8_t> host(count * width);
  absl::Status copied = buffer.CopyToHost(host.data(), host.size());
  if (!copied.ok()) return copied;
  for (size_t i = 0; i < count; ++i) {
    const double want = SumAt(world, i) + world * offset;
    const double got = Decode(type, &host[i * width]);
    if (got != want) {
      return absl::InternalError(absl::StrCat(DataTypeName(type), " all-reduce: element ", i, " is ", got, ", want ",
                                              want));
    }
  }
  return absl::OkStatus();
}

// Runs `check` on its own thread and gives up on it after `limit`, so a hang
// in NCCL's teardown fails the check instead of the whole run.
absl::Status WithinLimit(milliseconds limit, std::function<absl::Status()> check) {
  struct Shared {
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    absl::Status status;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, check = std::move(check)] {
    absl::Status status = check();
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->status = std::move(status);
    shared->done = true;
    shared->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->done_cv.wait_for(lock, limit, [&] { return shared->done; })) {
    return absl::DeadlineExceededError(absl::StrCat("the check itself hung for ", limit.count(), " ms"));
  }
  return shared->status;
}

}  // namespace

std::string NcclChecksUnavailableReason() {
  const absl::Status build = NcclBuildStatus();
  if (!build.ok()) return std::string(build.message());
  const absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return absl::StrCat("no usable CUDA device: ", count.status().message());
  if (*count == 0) return "no CUDA device is visible";
  return "";
}

absl::Status CheckAllReduce(int world, DataType type) {
  constexpr size_t kCount = 100003;  // odd, so kernels' vector tails are exercised
  return InWorld(world, [&](int rank, Communicator& comm) -> absl::Status {
    absl::StatusOr<DeviceBuffer> buffer = FilledBuffer(rank, kCount, type);
    if (!buffer.ok()) return buffer.status();
    absl::Status status = comm.AllReduce(buffer->data(), kCount, type);
    if (!status.ok()) return status;
    return ExpectSums(*buffer, world, kCount, type);
  });
}

absl::Status CheckBroadcast(int world) {
  constexpr size_t kBytes = (1 << 20) + 7;
  const int root = world - 1;  // not rank 0 whenever there is a choice
  auto pattern = [](size_t i) { return static_cast<uint8_t>(i * 7 + 3); };
  return InWorld(world, [&](int rank, Communicator& comm) -> absl::Status {
    std::vector<uint8_t> host(kBytes, 0xee);
    if (rank == root) {
      for (size_t i = 0; i < kBytes; ++i) host[i] = pattern(i);
    }
    absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(rank, kBytes);
    if (!buffer.ok()) return buffer.status();
    absl::Status status = buffer->CopyFromHost(host.data(), kBytes);
    if (status.ok()) status = comm.Broadcast(buffer->data(), kBytes, root);
    if (status.ok()) status = buffer->CopyToHost(host.data(), kBytes);
    if (!status.ok()) return status;
    for (size_t i = 0; i < kBytes; ++i) {
      if (host[i] != pattern(i)) return absl::InternalError(absl::StrCat("broadcast: byte ", i, " differs from the root's"));
    }
    return absl::OkStatus();
  });
}

absl::Status CheckAllGather(int world) {
  constexpr size_t kBytes = 4099;
  auto byte = [](int rank, size_t i) { return static_cast<uint8_t>(rank * 31 + i); };
  return InWorld(world, [&](int rank, Communicator& comm) -> absl::Status {
    std::vector<uint8_t> in(kBytes);
    for (size_t i = 0; i < kBytes; ++i) in[i] = byte(rank, i);
    absl::StatusOr<DeviceBuffer> input = DeviceBuffer::Allocate(rank, kBytes);
    if (!input.ok()) return input.status();
    absl::StatusOr<DeviceBuffer> output = DeviceBuffer::Allocate(rank, kBytes * world);
    if (!output.ok()) return output.status();
    absl::Status status = input->CopyFromHost(in.data(), kBytes);
    if (status.ok()) status = comm.AllGather(input->data(), kBytes, output->data());
    std::vector<uint8_t> out(kBytes * world);
    if (status.ok()) status = output->CopyToHost(out.data(), out.size());
    if (!status.ok()) return status;
    for (int from = 0; from < world; ++from) {
      for (size_t i = 0; i < kBytes; ++i) {
        if (out[from * kBytes + i] != byte(from, i)) {
          return absl::InternalError(absl::StrCat("all-gather: byte ", i, " of rank ", from, "'s block is wrong"));
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CheckReduceScatter(int world) {
  constexpr size_t kBlock = 10007;  // odd, so kernels' vector tails are exercised
  const DataType type = DataType::kFloat32;
  return InWorld(world, [&](int rank, Communicator& comm) -> absl::Status {
    // Separate output, then in place (out = in + rank * block).
    absl::StatusOr<DeviceBuffer> input = FilledBuffer(rank, kBlock * world, type);
    if (!input.ok()) return input.status();
    absl::StatusOr<DeviceBuffer> output = DeviceBuffer::Allocate(rank, kBlock * sizeof(float));
    if (!output.ok()) return output.status();
    absl::Status status = comm.ReduceScatter(input->data(), output->data(), kBlock, type);
    float* own_block = static_cast<float*>(input->data()) + rank * kBlock;
    if (status.ok()) status = comm.ReduceScatter(input->data(), own_block, kBlock, type);
    if (!status.ok()) return status;
    std::vector<float> separate(kBlock), in_place(kBlock * world);
    status = output->CopyToHost(separate.data(), kBlock * sizeof(float));
    if (status.ok()) status = input->CopyToHost(in_place.data(), in_place.size() * sizeof(float));
    if (!status.ok()) return status;
    for (size_t i = 0; i < kBlock; ++i) {
      const double want = SumAt(world, rank * kBlock + i);
      if (separate[i] != want || in_place[rank * kBlock + i] != want) {
        return absl::InternalError(absl::StrCat("reduce-scatter: element ", i, " of rank ", rank, "'s block is ",
                                                separate[i], " (in place ", in_place[rank * kBlock + i], "), want ",
                                                want));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CheckReduceScatterInPlace(int world) {
  constexpr size_t kCount = 30011;  // not a multiple of any world size > 1: uneven blocks
  const DataType type = DataType::kFloat32;
  return InWorld(world, [&](int rank, Communicator& comm) -> absl::Status {
    absl::StatusOr<DeviceBuffer> data = FilledBuffer(rank, kCount, type);
    if (!data.ok()) return data.status();
    absl::Status status = comm.ReduceScatterInPlaceAsync(data->data(), kCount, type)->Wait();
    std::vector<float> host(kCount);
    if (status.ok()) status = data->CopyToHost(host.data(), kCount * sizeof(float));
    if (!status.ok()) return status;
    const RangeLayout layout = comm.ReduceScatterLayout(kCount, type);
    if (layout != NearEqualRanges(kCount, world)) return absl::InternalError("in-place reduce-scatter: unexpected layout");
    for (const ElementRange& range : layout[static_cast<size_t>(rank)]) {
      for (size_t i = range.begin; i < range.end; ++i) {
        if (host[i] != SumAt(world, i)) {
          return absl::InternalError(absl::StrCat("in-place reduce-scatter: element ", i, " on rank ", rank, " is ",
                                                  host[i], ", want ", SumAt(world, i)));
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CheckBarrier(int world) {
  return InWorld(world, [&](int, Communicator& comm) -> absl::Status {
    for (int round = 0; round < 3; ++round) {
      absl::Status status = comm.Barrier();
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  });
}

absl::Status CheckManyOpsInFlight(int world) {
  constexpr int kOps = 64;
  constexpr size_t kCount = 4096;
  return InWorld(world, [&](int rank, Communicator& comm) -> absl::Status {
    std::vector<DeviceBuffer> buffers;
    for (int op = 0; op < kOps; ++op) {
      absl::StatusOr<DeviceBuffer> buffer = FilledBuffer(rank, kCount, DataType::kFloat32, op);
      if (!buffer.ok()) return buffer.status();
      buffers.push_back(std::move(*buffer));
    }
    std::vector<std::shared_ptr<Work>> works;
    for (int op = 0; op < kOps; ++op) works.push_back(comm.AllReduceAsync(buffers[op].data(), kCount, DataType::kFloat32));
    for (int op = 0; op < kOps; ++op) {
      absl::Status status = works[op]->Wait();
      if (!status.ok()) return absl::Status(status.code(), absl::StrCat("op ", op, ": ", status.message()));
      if (!works[op]->Done()) return absl::InternalError(absl::StrCat("op ", op, ": Done() is false after Wait()"));
    }
    for (int op = 0; op < kOps; ++op) {
      absl::Status status = ExpectSums(buffers[op], world, kCount, DataType::kFloat32, op);
      if (!status.ok()) return absl::Status(status.code(), absl::StrCat("op ", op, ": ", status.message()));
    }
    return absl::OkStatus();
  });
}

absl::Status CheckDoneBecomesTrue(int world) {
  constexpr size_t kCount = 1 << 22;
  return InWorld(world, [&](int rank, Communicator& comm) -> absl::Status {
    absl::StatusOr<DeviceBuffer> buffer = FilledBuffer(rank, kCount, DataType::kFloat32);
    if (!buffer.ok()) return buffer.status();
    std::shared_ptr<Work> work = comm.AllReduceAsync(buffer->data(), kCount, DataType::kFloat32);
    const Clock::time_point start = Clock::now();
    while (!work->Done()) {
      if (Since(start) > milliseconds(10000)) return absl::InternalError("Done() still false after 10 s");
      std::this_thread::sleep_for(milliseconds(1));
    }
    absl::Status status = work->Wait();
    if (!status.ok()) return status;
    return ExpectSums(*buffer, world, kCount, DataType::kFloat32);
  });
}

absl::Status CheckOpWaitsForComputeStream() {
  constexpr size_t kCount = 1024;
  constexpr milliseconds kStall(300);
  absl::StatusOr<Comms> comms = CreateWorld(1, milliseconds(10000));
  if (!comms.ok()) return comms.status();
  Communicator& comm = *(*comms)[0];
  absl::StatusOr<DeviceBuffer> buffer = FilledBuffer(0, kCount, DataType::kFloat32);
  if (!buffer.ok()) return buffer.status();
  absl::Status status = StallStream(0, nullptr, kStall);  // the trainer's pending compute
  if (!status.ok()) return status;
  const Clock::time_point start = Clock::now();
  std::shared_ptr<Work> work = comm.AllReduceAsync(buffer->data(), kCount, DataType::kFloat32);
  if (work->Done()) return absl::InternalError("the op finished before the compute stream's work");
  status = work->Wait();
  if (!status.ok()) return status;
  const milliseconds waited = Since(start);
  if (waited < kStall - milliseconds(50)) {
    return absl::InternalError(absl::StrCat("Wait() returned after ", waited.count(), " ms, before the ",
                                            kStall.count(), " ms of compute-stream work queued ahead of the op"));
  }
  return ExpectSums(*buffer, 1, kCount, DataType::kFloat32);
}

absl::Status CheckBadOptionsRejected() {
  auto store = std::make_shared<InMemoryStore>();
  struct Case {
    const char* what;
    NcclOptions options;
    std::shared_ptr<RendezvousStore> store;
    absl::StatusCode code;
  };
  std::vector<Case> cases;
  cases.push_back({"size 0", OptionsFor(0, 0, milliseconds(1000)), store, absl::StatusCode::kInvalidArgument});
  cases.push_back({"rank 2 of 2", OptionsFor(2, 2, milliseconds(1000)), store, absl::StatusCode::kInvalidArgument});
  cases.push_back({"zero timeout", OptionsFor(0, 1, milliseconds(0)), store, absl::StatusCode::kInvalidArgument});
  cases.push_back({"no store", OptionsFor(0, 1, milliseconds(1000)), nullptr, absl::StatusCode::kInvalidArgument});
  NcclOptions negative = OptionsFor(0, 1, milliseconds(1000));
  negative.device = -1;
  cases.push_back({"device -1", negative, store, absl::StatusCode::kInvalidArgument});
  for (const Case& c : cases) {
    absl::Status status = ExpectCode(CreateNcclCommunicator(c.options, c.store).status(), c.code, c.what);
    if (!status.ok()) return status;
  }
  // A device past the last one: named in the error.
  NcclOptions missing = OptionsFor(0, 1, milliseconds(1000));
  missing.device = 999;
  const absl::Status status = CreateNcclCommunicator(missing, store).status();
  absl::Status checked = ExpectCode(status, absl::StatusCode::kInvalidArgument, "device 999");
  if (checked.ok()) checked = Expect(absl::StrContains(status.message(), "999"), "device 999: error does not name it");
  return checked;
}

absl::Status CheckBadArgumentBreaks() {
  absl::StatusOr<Comms> comms = CreateWorld(1, milliseconds(10000));
  if (!comms.ok()) return comms.status();
  Communicator& comm = *(*comms)[0];
  absl::StatusOr<DeviceBuffer> buffer = FilledBuffer(0, 16, DataType::kFloat32);
  if (!buffer.ok()) return buffer.status();
  absl::Status status = ExpectCode(comm.Broadcast(buffer->data(), 64, /*root=*/5), absl::StatusCode::kInvalidArgument,
                                   "broadcast from rank 5 of 1");
  if (status.ok()) {
    status = ExpectCode(comm.AllReduce(buffer->data(), 16, DataType::kFloat32), absl::StatusCode::kAborted,
                        "all-reduce after the failure");
  }
  if (status.ok()) status = ExpectCode(comm.Barrier(), absl::StatusCode::kAborted, "barrier after the failure");
  return status;
}

absl::Status CheckMissingUniqueIdTimesOut() {
  constexpr milliseconds kTimeout(500);
  NcclOptions options = OptionsFor(1, 2, kTimeout);
  options.device = 0;
  const Clock::time_point start = Clock::now();
  const absl::Status status = CreateNcclCommunicator(options, std::make_shared<InMemoryStore>()).status();
  const milliseconds took = Since(start);
  absl::Status checked = ExpectCode(status, absl::StatusCode::kDeadlineExceeded, "rank 1 of 2 without rank 0");
  if (checked.ok()) {
    checked = Expect(took < 2 * kTimeout, absl::StrCat("creation gave up after ", took.count(), " ms, over 2x the ",
                                                       kTimeout.count(), " ms timeout"));
  }
  return checked;
}

absl::Status CheckMissingPeerTimesOutSetup() {
  constexpr milliseconds kTimeout(1000);
  return WithinLimit(milliseconds(30000), [=]() -> absl::Status {
    const Clock::time_point start = Clock::now();
    const absl::Status status =
        CreateNcclCommunicator(OptionsFor(0, 2, kTimeout), std::make_shared<InMemoryStore>()).status();
    const milliseconds took = Since(start);
    absl::Status checked = ExpectCode(status, absl::StatusCode::kDeadlineExceeded, "rank 0 of 2 without rank 1");
    if (checked.ok()) {
      checked = Expect(took < 3 * kTimeout, absl::StrCat("setup gave up after ", took.count(), " ms, over 3x the ",
                                                         kTimeout.count(), " ms timeout"));
    }
    return checked;
  });
}

absl::Status CheckEndedGenerationStopsSetup() {
  // Rank 1 never joins (it died); the coordinator ends the generation while
  // rank 0 waits in setup. Rank 0 must notice through the store, long before
  // its 20 s timeout.
  constexpr milliseconds kTimeout(20000);
  return WithinLimit(milliseconds(30000), [=]() -> absl::Status {
    auto store = std::make_shared<EndingStore>();
    const NcclOptions options = OptionsFor(0, 2, kTimeout);
    std::atomic<bool> returned{false};
    std::thread ender([&] {
      // Rank 0 reads the id's key only from inside the setup wait.
      while (store->reads(NcclUniqueIdKey(options.key_prefix)) < 1 && !returned) {
        std::this_thread::sleep_for(milliseconds(5));
      }
      store->End();
    });
    const Clock::time_point start = Clock::now();
    const absl::Status status = CreateNcclCommunicator(options, store).status();
    const milliseconds took = Since(start);
    returned = true;
    ender.join();
    absl::Status checked = ExpectCode(status, absl::StatusCode::kFailedPrecondition, "setup after the generation ended");
    if (checked.ok()) {
      checked = Expect(absl::StrContains(status.message(), EndingStore::kEndedMessage),
                       absl::StrCat("the error does not say the generation ended: ", status.message()));
    }
    if (checked.ok()) {
      checked = Expect(took < milliseconds(5000), absl::StrCat("setup stopped after ", took.count(),
                                                               " ms, not within 5 s of the generation's end"));
    }
    return checked;
  });
}

// The failure checks keep timeouts above NCCL's setup time on one GPU
// (which also runs under the timeout) and stalls well above the timeouts.
absl::Status CheckHungOpTimesOut() {
  constexpr milliseconds kTimeout(1500);
  constexpr milliseconds kStall(5000);
  return WithinLimit(milliseconds(60000), [=]() -> absl::Status {
    absl::StatusOr<Comms> comms = CreateWorld(1, kTimeout);
    if (!comms.ok()) return comms.status();
    absl::StatusOr<DeviceBuffer> buffer = FilledBuffer(0, 1024, DataType::kFloat32);
    if (!buffer.ok()) return buffer.status();
    absl::Status status = StallStream(0, nullptr, kStall);
    if (!status.ok()) return status;

    const Clock::time_point start = Clock::now();
    Communicator& comm = *(*comms)[0];
    std::shared_ptr<Work> hung = comm.AllReduceAsync(buffer->data(), 1024, DataType::kFloat32);
    std::shared_ptr<Work> pending = comm.BroadcastAsync(buffer->data(), 64, 0);
    status = ExpectCode(hung->Wait(), absl::StatusCode::kDeadlineExceeded, "the held-back op");
    const milliseconds took = Since(start);
    if (status.ok()) {
      status = Expect(took >= kTimeout - milliseconds(20) && took < kTimeout + milliseconds(700),
                      absl::StrCat("Wait() gave up after ", took.count(), " ms; the timeout is ", kTimeout.count()));
    }
    if (status.ok()) status = ExpectCode(pending->Wait(), absl::StatusCode::kDeadlineExceeded, "the op queued behind it");
    if (status.ok()) status = Expect(hung->Done() && pending->Done(), "failed ops must be Done()");
    if (status.ok()) {
      std::shared_ptr<Work> later = comm.AllReduceAsync(buffer->data(), 1024, DataType::kFloat32);
      status = Expect(later->Done(), "an op issued after the failure must fail at once");
      if (status.ok()) status = ExpectCode(later->Wait(), absl::StatusCode::kAborted, "an op issued after the failure");
    }
    if (!status.ok()) return status;

    const Clock::time_point destroy = Clock::now();
    comms->clear();
    const milliseconds teardown = Since(destroy);
    return Expect(teardown < kStall + milliseconds(5000),
                  absl::StrCat("destroying the broken communicator took ", teardown.count(), " ms"));
  });
}

absl::Status CheckWatchdogBreaksWithoutWait() {
  constexpr milliseconds kTimeout(1500);
  constexpr milliseconds kStall(5000);
  return WithinLimit(milliseconds(60000), [=]() -> absl::Status {
    absl::StatusOr<Comms> comms = CreateWorld(1, kTimeout);
    if (!comms.ok()) return comms.status();
    absl::StatusOr<DeviceBuffer> buffer = FilledBuffer(0, 1024, DataType::kFloat32);
    if (!buffer.ok()) return buffer.status();
    absl::Status status = StallStream(0, nullptr, kStall);
    if (!status.ok()) return status;

    const Clock::time_point start = Clock::now();
    Communicator& comm = *(*comms)[0];
    std::shared_ptr<Work> hung = comm.AllReduceAsync(buffer->data(), 1024, DataType::kFloat32);
    // Nobody waits; the watchdog must notice within about 1.1x the timeout.
    std::this_thread::sleep_for(2 * kTimeout);
    std::shared_ptr<Work> later = comm.BarrierAsync();
    status = Expect(later->Done(), "the watchdog did not break the communicator while nobody waited");
    if (status.ok()) status = ExpectCode(later->Wait(), absl::StatusCode::kAborted, "an op after the watchdog fired");
    if (status.ok()) status = ExpectCode(hung->Wait(), absl::StatusCode::kDeadlineExceeded, "the held-back op");
    if (status.ok()) {
      status = Expect(Since(start) < kStall, "the failure was reported only after the GPU got to the op");
    }
    return status;
  });
}

absl::Status CheckNoGpuIsReportedClearly() {
  const absl::Status status = CreateNcclCommunicator(OptionsFor(0, 1, milliseconds(1000)),
                                                     std::make_shared<InMemoryStore>())
                                  .status();
  absl::Status checked = ExpectCode(status, absl::StatusCode::kFailedPrecondition, "creation without a GPU");
  if (checked.ok()) {
    checked = Expect(absl::StrContains(status.message(), "CUDA device 0"),
                     absl::StrCat("the error does not name the device: ", status.message()));
  }
  return checked;
}

std::vector<NcclCheck> AllNcclChecks(int world) {
  std::vector<NcclCheck> checks;
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64,
                        DataType::kInt64, DataType::kUInt8}) {
    checks.push_back({absl::StrCat("all_reduce_", DataTypeName(type)), [=] { return CheckAllReduce(world, type); }});
  }
  checks.push_back({"broadcast", [=] { return CheckBroadcast(world); }});
  checks.push_back({"all_gather", [=] { return CheckAllGather(world); }});
  checks.push_back({"reduce_scatter", [=] { return CheckReduceScatter(world); }});
  checks.push_back({"reduce_scatter_in_place", [=] { return CheckReduceScatterInPlace(world); }});
  checks.push_back({"barrier", [=] { return CheckBarrier(world); }});
  checks.push_back({"many_ops_in_flight", [=] { return CheckManyOpsInFlight(world); }});
  checks.push_back({"done_becomes_true", [=] { return CheckDoneBecomesTrue(world); }});
  checks.push_back({"op_waits_for_compute_stream", CheckOpWaitsForComputeStream});
  checks.push_back({"bad_options_rejected", CheckBadOptionsRejected});
  checks.push_back({"bad_argument_breaks", CheckBadArgumentBreaks});
  checks.push_back({"missing_unique_id_times_out", CheckMissingUniqueIdTimesOut});
  checks.push_back({"missing_peer_times_out_setup", CheckMissingPeerTimesOutSetup});
  checks.push_back({"ended_generation_stops_setup", CheckEndedGenerationStopsSetup});
  // These leave a stalled stream and an aborted communicator behind.
  checks.push_back({"hung_op_times_out", CheckHungOpTimesOut});
  checks.push_back({"watchdog_breaks_without_wait", CheckWatchdogBreaksWithoutWait});
  return checks;
}

}  // namespace herd
