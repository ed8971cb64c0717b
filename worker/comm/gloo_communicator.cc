#include "worker/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <signal.h>

#include <algorithm>
#include <mutex>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/bfloat16.h"
#include "worker/comm/float_sum.h"
#include "worker/comm/collective_queue.h"
#include "worker/comm/gloo_ring_reduce_scatter.h"
#include "worker/comm/gloo_store_adapter.h"

namespace herd {
namespace {

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

ReduceFunction SumFor(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return &SumFloat32;
    case DataType::kFloat64:
      return &gloo::sum<double>;
    case DataType::kInt64:
      return &gloo::sum<int64_t>;
    case DataType::kFloat16:
      return &gloo::sum<gloo::float16>;
    case DataType::kBFloat16:
      return &SumBFloat16;
    case DataType::kUInt8:
      return &gloo::sum<uint8_t>;
  }
  return nullptr;
}

// Gloo reports timeouts and closed connections alike as IoException; only
// the message tells them apart.
absl::StatusCode CodeForIoError(const char* message) {
  return absl::StrContains(message, "Timed out") || absl::StrContains(message, "timeout") ||
                 absl::StrContains(message, "Timeout")
             ? absl::StatusCode::kDeadlineExceeded
             : absl::StatusCode::kUnavailable;
}

// Runs a Gloo call; Gloo throws, herd returns Status.
template <typename Fn>
absl::Status RunGloo(const std::string& what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    return absl::Status(CodeForIoError(e.what()), absl::StrCat(what, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

// Gloo's option setters size buffers by the element type; any type of the
// right width will do because the reduce function is given separately.
template <typename Options>
void SetOutputOfWidth(Options& options, void* data, size_t count, size_t width) {
  switch (width) {
    case 1:
      options.template setOutput<uint8_t>(static_cast<uint8_t*>(data), count);
      break;
    case 2:
      options.template setOutput<uint16_t>(static_cast<uint16_t*>(data), count);
      break;
    case 4:
      options.template setOutput<uint32_t>(static_cast<uint32_t*>(data), count);
      break;
    default:
      options.template setOutput<uint64_t>(static_cast<uint64_t*>(data), count);
      break;
  }
}

// Large all-reduces run as one ring per stream at once, each over its own
// contiguous stripe of the buffer and its own Gloo context (own TCP
// connections to every peer, own I/O thread). With one context all of a
// rank's socket I/O goes through one Gloo thread: on loopback that kept ~1.5
// of 2 cores busy, two streams ~1.8, for ~20% more bus bandwidth at 64 MiB
// (bench/README.md).
constexpr int kStreams = 2;
// Smaller all-reduces stay on one stream: a stripe costs a thread start
// (tens of microseconds) and halves Gloo's pipelined segments.
constexpr size_t kStripeMinBytes = 4 << 20;

// Runs fn(0..n-1) at once: fn(0) here, the others on threads of their own;
// rethrows the first failure once all have returned. A stripe whose thread
// cannot start runs here afterwards: each stripe is a collective of its own,
// so peers wait for it rather than mismatch.
template <typename Fn>
void RunConcurrently(size_t n, Fn&& fn) {
  std::vector<std::exception_ptr> errors(n);
  auto guarded = [&](size_t i) {
    try {
      fn(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  std::vector<size_t> inline_stripes = {0};
  for (size_t i = 1; i < n; ++i) {
    try {
      threads.emplace_back(guarded, i);
    } catch (const std::system_error&) {
      inline_stripes.push_back(i);
    }
  }
  for (size_t i : inline_stripes) guarded(i);
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

class GlooCommunicator : public Communicator {
 public:
  // contexts[0] carries every collective; the others only stripes of large
  // all-reduces.
  GlooCommunicator(const GlooOptions& options, std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts)
      : options_(options), contexts_(std::move(contexts)), context_(contexts_.front()), queue_(options.threads) {}

  // The queue's threads use context_, so they stop first.
  ~GlooCommunicator() override { queue_.Shutdown(); }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  std::string backend() const override { return "gloo"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) override {
    std::string what = absl::StrCat("gloo all-reduce of ", count, " ", DataTypeName(type));
    return queue_.Submit(what, [this, data, count, type, what](uint64_t sequence) {
      if (count == 0 || size() == 1) return absl::OkStatus();  // a sum over one rank is the input
      return RunGloo(what, [&] {
        const size_t width = DataTypeSize(type);
        const Stripes stripes = StripesOf(count, type);
        RunConcurrently(stripes.count, [&](size_t stripe) {
          const ElementRange range = stripes.Range(stripe, count);
          if (range.size() == 0) return;
          gloo::AllreduceOptions options(contexts_[stripe]);
          // Ring: bandwidth-optimal, and what a direct Gloo user would pick for gradients.
          options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          // Explicit: ReduceScatterLayout reproduces the segments it gives.
          options.setMaxSegmentSize(kGlooMaxSegmentBytes);
          SetOutputOfWidth(options, static_cast<char*>(data) + range.begin * width, range.size(), width);
          options.setReduceFunction(SumFor(type));
          options.setTag(static_cast<uint32_t>(sequence));  // contexts never share messages
          options.setTimeout(options_.timeout);
          gloo::allreduce(options);
        });
      });
    });
  }

  std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) override {
    std::string what = absl::StrCat("gloo broadcast of ", bytes, " bytes from rank ", root);
    return queue_.Submit(what, [this, data, bytes, root, what](uint64_t sequence) {
      if (root < 0 || root >= size()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": root out of range for ", size(), " ranks"));
      }
      if (bytes == 0 || size() == 1) return absl::OkStatus();
      return RunGloo(what, [&] {
        gloo::BroadcastOptions options(context_);
        options.setOutput<uint8_t>(static_cast<uint8_t*>(data), bytes);  // the root sends in place
        options.setRoot(root);
        options.setTag(static_cast<uint32_t>(sequence));
        options.setTimeout(options_.timeout);
        gloo::broadcast(options);
      });
    });
  }

  std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) override {
    std::string what = absl::StrCat("gloo all-gather of ", bytes, " bytes per rank");
    return queue_.Submit(what, [this, in, bytes, out, what](uint64_t sequence) {
      if (bytes == 0) return absl::OkStatus();
      if (size() == 1) {
        if (in != out) std::memmove(out, in, bytes);
        return absl::OkStatus();
      }
      return RunGloo(what, [&] {
        gloo::AllgatherOptions options(context_);
        options.setInput<uint8_t>(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
        options.setOutput<uint8_t>(static_cast<uint8_t*>(out), bytes * size());
        options.setTag(static_cast<uint32_t>(sequence));
        options.setTimeout(options_.timeout);
        gloo::allgather(options);
      });
    });
  }

  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) override {
    std::string what = absl::StrCat("gloo reduce-scatter of ", block_count, " ", DataTypeName(type), " per rank");
    return queue_.Submit(what, [this, in, out, block_count, type, what](uint64_t sequence) {
      std::vector<ElementRange> blocks;
      for (int r = 0; r < size(); ++r) blocks.push_back(ElementRange{r * block_count, (r + 1) * block_count});
      return RunGloo(what, [&] {
        RingReduceScatter(*context_, in, out, blocks, DataTypeSize(type), SumFor(type),
                          static_cast<uint32_t>(sequence), options_.timeout);
      });
    });
  }

  RangeLayout ReduceScatterLayout(size_t count, DataType type) const override {
    RangeLayout layout(static_cast<size_t>(size()));
    if (size() == 1) {
      layout[0].push_back(ElementRange{0, count});
      return layout;
    }
    const Stripes stripes = StripesOf(count, type);
    for (size_t stripe = 0; stripe < stripes.count; ++stripe) {
      const ElementRange whole = stripes.Range(stripe, count);
      const std::vector<ElementRange> finished = GlooRingFinishedRanges(whole.size(), DataTypeSize(type), size());
      for (size_t r = 0; r < finished.size(); ++r) {
        if (finished[r].size() == 0) continue;
        layout[r].push_back(ElementRange{whole.begin + finished[r].begin, whole.begin + finished[r].end});
      }
    }
    return layout;
  }

  // The all-reduce's stripes, each its own ring over its own context, each
  // rank finishing the part of it the all-reduce finishes there.
  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) override {
    std::string what = absl::StrCat("gloo in-place reduce-scatter of ", count, " ", DataTypeName(type));
    return queue_.Submit(what, [this, data, count, type, what](uint64_t sequence) {
      if (count == 0 || size() == 1) return absl::OkStatus();
      return RunGloo(what, [&] {
        const size_t width = DataTypeSize(type);
        const Stripes stripes = StripesOf(count, type);
        RunConcurrently(stripes.count, [&](size_t stripe) {
          const ElementRange whole = stripes.Range(stripe, count);
          if (whole.size() == 0) return;
          char* base = static_cast<char*>(data) + whole.begin * width;
          const std::vector<ElementRange> blocks = GlooRingFinishedRanges(whole.size(), width, size());
          RingReduceScatter(*contexts_[stripe], base, base + blocks[static_cast<size_t>(rank())].begin * width,
                            blocks, width, SumFor(type), static_cast<uint32_t>(sequence), options_.timeout);
        });
      });
    });
  }

  std::shared_ptr<Work> BarrierAsync() override {
    std::string what = "gloo barrier";
    return queue_.Submit(what, [this, what](uint64_t sequence) {
      if (size() == 1) return absl::OkStatus();
      return RunGloo(what, [&] {
        gloo::BarrierOptions options(context_);
        options.setTag(static_cast<uint32_t>(sequence));
        options.setTimeout(options_.timeout);
        gloo::barrier(options);
      });
    });
  }

 private:
  // How an all-reduce (and the in-place reduce-scatter) of `count` elements
  // is cut into stripes: one per context from kStripeMinBytes on.
  struct Stripes {
    size_t count = 1;
    size_t per_stripe = 0;
    ElementRange Range(size_t stripe, size_t elements) const {
      const size_t begin = std::min(elements, stripe * per_stripe);
      return ElementRange{begin, std::min(elements, begin + per_stripe)};
    }
  };
  Stripes StripesOf(size_t count, DataType type) const {
    Stripes stripes;
    stripes.count = count * DataTypeSize(type) >= kStripeMinBytes ? contexts_.size() : 1;
    stripes.per_stripe = (count + stripes.count - 1) / stripes.count;
    return stripes;
  }

  const GlooOptions options_;
  const std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts_;
  const std::shared_ptr<gloo::rendezvous::Context> context_;  // contexts_[0]
  CollectiveQueue queue_;
};

absl::Status ValidateOptions(const GlooOptions& options, const RendezvousStore* store) {
  if (options.size < 1) return absl::InvalidArgumentError(absl::StrCat("gloo: size ", options.size, " < 1"));
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: rank ", options.rank, " not in [0, ", options.size, ")"));
  }
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("gloo: timeout must be positive");
  if (options.threads < 1) return absl::InvalidArgumentError("gloo: threads must be >= 1");
  if (store == nullptr) return absl::InvalidArgumentError("gloo: no rendezvous store");
  return absl::OkStatus();
}

}  // namespace

namespace {

// Gloo's TCP pairs wait this many times the context's timeout to connect.
constexpr int kGlooConnectTimeoutFactor = 5;

// The context timeout to connect with, so that each connect wait ends
// within `collective_timeout` (at least 1 ms).
std::chrono::milliseconds ConnectTimeout(std::chrono::milliseconds collective_timeout) {
  return std::max(std::chrono::milliseconds(1), collective_timeout / kGlooConnectTimeoutFactor);
}

// One Gloo context: a TCP device (with its I/O thread) and a connection to
// every peer. Stream 0 keeps the generation's key prefix as it is; the other
// streams rendezvous under a sub-prefix of it.
absl::StatusOr<std::shared_ptr<gloo::rendezvous::Context>> ConnectStream(const GlooOptions& options,
                                                                         std::shared_ptr<RendezvousStore> store,
                                                                         int stream) {
  std::shared_ptr<gloo::transport::Device> device;
  absl::Status status = RunGloo(absl::StrCat("gloo: creating a TCP device on ", options.host), [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    device = gloo::transport::tcp::CreateDevice(attr);
  });
  if (!status.ok()) return absl::UnavailableError(status.message());

  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  // Gloo waits up to five times the context's timeout for a pair to connect
  // (tcp::Pair::waitUntil, "a longer timeout when waiting for initial
  // connect"): a peer whose trainer died after publishing its address held
  // a 30 s collective timeout's rendezvous for 150 s. Connecting runs with a
  // fifth of it, so each connect wait ends within the collective timeout;
  // store waits keep the whole timeout (the adapter's own).
  context->setTimeout(ConnectTimeout(options.timeout));
  const std::string prefix =
      stream == 0 ? options.key_prefix : absl::StrCat(options.key_prefix, "stream", stream, "/");
  GlooStoreAdapter adapter(std::move(store), prefix, options.timeout);
  const std::string what = absl::StrCat("gloo rendezvous (rank ", options.rank, " of ", options.size, ")");
  status = RunGloo(what, [&] { context->connectFullMesh(adapter, device); });
  // Collectives set their own timeout; anything else Gloo waits for uses this.
  context->setTimeout(options.timeout);
  if (!status.ok()) {
    // A store failure is reported as the store saw it (usually a peer that
    // never published its address), not as Gloo's rethrown text.
    if (!adapter.last_error().ok()) {
      return absl::Status(adapter.last_error().code(), absl::StrCat(what, ": ", adapter.last_error().message()));
    }
    return status;
  }
  return context;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options,
                                                                     std::shared_ptr<RendezvousStore> store) {
  absl::Status valid = ValidateOptions(options, store.get());
  if (!valid.ok()) return valid;
  // Gloo writes to its sockets with writev, which raises SIGPIPE when the
  // peer has gone: by default that kills the process silently, instead of
  // the collective failing with UNAVAILABLE so the generation logic can act.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { signal(SIGPIPE, SIG_IGN); });
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts;
  const int streams = options.size > 1 ? kStreams : 1;
  for (int stream = 0; stream < streams; ++stream) {
    auto context = ConnectStream(options, store, stream);
    if (!context.ok()) return context.status();
    contexts.push_back(*std::move(context));
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(options, std::move(contexts)));
}

}  // namespace herd
