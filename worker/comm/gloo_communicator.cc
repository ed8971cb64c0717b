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

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/bfloat16.h"
#include "worker/comm/collective_queue.h"
#include "worker/comm/gloo_store_adapter.h"

namespace herd {
namespace {

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

ReduceFunction SumFor(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return &gloo::sum<float>;
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

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options, std::shared_ptr<gloo::rendezvous::Context> context)
      : options_(options), context_(std::move(context)), queue_(options.threads) {}

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
        gloo::AllreduceOptions options(context_);
        // Ring: bandwidth-optimal, and what a direct Gloo user would pick for gradients.
        options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        SetOutputOfWidth(options, data, count, DataTypeSize(type));
        options.setReduceFunction(SumFor(type));
        options.setTag(static_cast<uint32_t>(sequence));
        options.setTimeout(options_.timeout);
        gloo::allreduce(options);
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
  const GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
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

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options,
                                                                     std::shared_ptr<RendezvousStore> store) {
  absl::Status valid = ValidateOptions(options, store.get());
  if (!valid.ok()) return valid;

  std::shared_ptr<gloo::transport::Device> device;
  absl::Status status = RunGloo(absl::StrCat("gloo: creating a TCP device on ", options.host), [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    device = gloo::transport::tcp::CreateDevice(attr);
  });
  if (!status.ok()) return absl::UnavailableError(status.message());

  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  context->setTimeout(options.timeout);
  GlooStoreAdapter adapter(std::move(store), options.key_prefix, options.timeout);
  const std::string what = absl::StrCat("gloo rendezvous (rank ", options.rank, " of ", options.size, ")");
  status = RunGloo(what, [&] { context->connectFullMesh(adapter, device); });
  if (!status.ok()) {
    // A store failure is reported as the store saw it (usually a peer that
    // never published its address), not as Gloo's rethrown text.
    if (!adapter.last_error().ok()) {
      return absl::Status(adapter.last_error().code(), absl::StrCat(what, ": ", adapter.last_error().message()));
    }
    return status;
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(options, std::move(context)));
}

}  // namespace herd
