// The NCCL build of nccl_communicator.h (nccl_unavailable.cc is the other).
#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/nccl_comm_state.h"
#include "worker/comm/nccl_init.h"
#include "worker/comm/nccl_status.h"
#include "worker/comm/nccl_work.h"

namespace herd {
namespace {

using nccl_internal::Clock;
using nccl_internal::CudaStatus;
using nccl_internal::FinishedWork;
using nccl_internal::NcclCommState;
using nccl_internal::NcclOp;
using nccl_internal::NcclStatus;
using nccl_internal::NcclWork;
using nccl_internal::ScopedDevice;

bool NcclTypeFor(DataType type, ncclDataType_t* out) {
  switch (type) {
    case DataType::kFloat32:
      *out = ncclFloat32;
      return true;
    case DataType::kFloat16:
      *out = ncclFloat16;
      return true;
    case DataType::kBFloat16:
      *out = ncclBfloat16;
      return true;
    case DataType::kFloat64:
      *out = ncclFloat64;
      return true;
    case DataType::kInt64:
      *out = ncclInt64;
      return true;
    case DataType::kUInt8:
      *out = ncclUint8;
      return true;
  }
  return false;
}

// What is wrong with a summing collective's arguments (OK: nothing); sets
// `nccl_type` for a known type.
absl::Status CheckSumArguments(DataType type, bool have_buffers, size_t count, ncclDataType_t* nccl_type) {
  if (!NcclTypeFor(type, nccl_type)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown data type ", static_cast<int>(type)));
  }
  if (!have_buffers && count > 0) return absl::InvalidArgumentError("null buffer");
  return absl::OkStatus();
}

// The CUDA objects a communicator owns besides NCCL's.
struct StreamResources {
  int device = 0;
  cudaStream_t stream = nullptr;  // where every collective runs
  cudaEvent_t ready = nullptr;    // re-recorded on the compute stream before each op
  void* barrier = nullptr;        // one byte the barrier all-reduces

  ~StreamResources() {
    ScopedDevice scoped(device);
    if (barrier != nullptr) cudaFree(barrier);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (stream != nullptr) cudaStreamDestroy(stream);  // returns at once; CUDA frees it when idle
  }
};

absl::Status CreateStreamResources(int device, StreamResources* resources) {
  resources->device = device;
  // Non-blocking: no implicit sync with the legacy default stream; the
  // events order it against the compute stream instead.
  cudaError_t error = cudaStreamCreateWithFlags(&resources->stream, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaEventCreateWithFlags(&resources->ready, cudaEventDisableTiming);
  if (error == cudaSuccess) error = cudaMalloc(&resources->barrier, 1);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(error, "nccl: creating the communicator's stream, event and barrier buffer", device);
  }
  return absl::OkStatus();
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const NcclOptions& options, std::shared_ptr<NcclCommState> state,
                   std::unique_ptr<StreamResources> resources)
      : options_(options), state_(std::move(state)), resources_(std::move(resources)) {
    // A tenth of the timeout: a hung op is noticed within 1.1x the timeout.
    const auto interval = std::clamp(options_.timeout / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
    watchdog_ = std::thread([state = state_, interval] { state->WatchdogLoop(interval); });
  }

  ~NcclCommunicator() override {
    state_->Drain();
    state_->StopWatchdog();
    watchdog_.join();
    if (!state_->Close()) {
      // cudaFree may wait for the whole device, and after an abort a kernel
      // may never finish: leak the one byte rather than risk hanging.
      resources_->barrier = nullptr;
    }
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) override {
    ncclDataType_t nccl_type = ncclFloat32;
    const absl::Status invalid = CheckSumArguments(type, data != nullptr, count, &nccl_type);
    return Issue(absl::StrCat("all-reduce of ", count, " ", DataTypeName(type)), invalid, count == 0,
                 [=](ncclComm_t comm, cudaStream_t stream) {
                   return ncclAllReduce(data, data, count, nccl_type, ncclSum, comm, stream);
                 });
  }

  std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) override {
    absl::Status invalid;
    if (root < 0 || root >= size()) {
      invalid = absl::InvalidArgumentError(absl::StrCat("root out of range for ", size(), " ranks"));
    } else if (data == nullptr && bytes > 0) {
      invalid = absl::InvalidArgumentError("null buffer");
    }
    return Issue(absl::StrCat("broadcast of ", bytes, " bytes from rank ", root), invalid, bytes == 0,
                 [=](ncclComm_t comm, cudaStream_t stream) {
                   return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, stream);
                 });
  }

  std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) override {
    absl::Status invalid;
    if ((in == nullptr || out == nullptr) && bytes > 0) invalid = absl::InvalidArgumentError("null buffer");
    return Issue(absl::StrCat("all-gather of ", bytes, " bytes per rank"), invalid, bytes == 0,
                 [=](ncclComm_t comm, cudaStream_t stream) {
                   return ncclAllGather(in, out, bytes, ncclUint8, comm, stream);
                 });
  }

  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) override {
    ncclDataType_t nccl_type = ncclFloat32;
    const absl::Status invalid = CheckSumArguments(type, in != nullptr && out != nullptr, block_count, &nccl_type);
    return Issue(absl::StrCat("reduce-scatter of ", block_count, " ", DataTypeName(type), " per rank"), invalid,
                 block_count == 0, [=](ncclComm_t comm, cudaStream_t stream) {
                   return ncclReduceScatter(in, out, block_count, nccl_type, ncclSum, comm, stream);
                 });
  }

  // Near-equal blocks: NCCL sums in an order of its own, so unlike Gloo's
  // layout this makes no bitwise promise against the all-reduce.
  RangeLayout ReduceScatterLayout(size_t count, DataType /*type*/) const override {
    return NearEqualRanges(count, size());
  }

  // One ncclReduce per rank onto that rank's block, in place, grouped into
  // one launch: no padded staging buffer, as ncclReduceScatter would need.
  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) override {
    ncclDataType_t nccl_type = ncclFloat32;
    const absl::Status invalid = CheckSumArguments(type, data != nullptr, count, &nccl_type);
    const RangeLayout layout = ReduceScatterLayout(count, type);
    const size_t width = DataTypeSize(type);
    return Issue(absl::StrCat("in-place reduce-scatter of ", count, " ", DataTypeName(type)), invalid, count == 0,
                 [=](ncclComm_t comm, cudaStream_t stream) {
                   ncclResult_t result = ncclGroupStart();
                   for (size_t r = 0; r < layout.size() && result == ncclSuccess; ++r) {
                     for (const ElementRange& range : layout[r]) {
                       if (range.size() == 0) continue;
                       void* at = static_cast<char*>(data) + range.begin * width;
                       result = ncclReduce(at, at, range.size(), nccl_type, ncclSum, static_cast<int>(r), comm, stream);
                       if (result != ncclSuccess) break;
                     }
                   }
                   const ncclResult_t ended = ncclGroupEnd();
                   return result != ncclSuccess ? result : ended;
                 });
  }

  std::shared_ptr<Work> BarrierAsync() override {
    void* flag = resources_->barrier;
    return Issue("barrier", absl::OkStatus(), false, [=](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(flag, flag, 1, ncclUint8, ncclSum, comm, stream);
    });
  }

 private:
  using Launch = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

  // Queues one collective on the communicator's stream, after the work
  // already queued on the compute stream, and tracks it.
  std::shared_ptr<Work> Issue(const std::string& description, const absl::Status& invalid, bool nothing_to_do,
                              const Launch& launch) {
    // One issuer at a time: the issue order is the order on the stream,
    // which every rank must share.
    std::lock_guard<std::mutex> lock(issue_mu_);
    const std::string what = absl::StrCat("nccl ", description, " #", next_sequence_++, " (", state_->name(), ")");
    if (state_->is_broken()) return Refuse(what, state_->BrokenError());
    if (!invalid.ok()) {
      // This rank skips an op its peers run: they have diverged for good.
      const absl::Status status(invalid.code(), absl::StrCat(what, ": ", invalid.message()));
      state_->Fail(status);
      return std::make_shared<FinishedWork>(status);
    }
    if (nothing_to_do) return std::make_shared<FinishedWork>(absl::OkStatus());

    const Clock::time_point deadline = Clock::now() + options_.timeout;
    const int device = options_.device;
    ScopedDevice scoped(device);
    if (!scoped.status().ok()) return Fail(what, scoped.status());
    cudaEvent_t done = nullptr;
    cudaError_t error = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return Fail(what, CudaStatus(error, "creating its completion event", device));
    }
    auto op = std::make_shared<NcclOp>(what, deadline, done);

    const cudaStream_t compute = static_cast<cudaStream_t>(options_.compute_stream);
    const cudaStream_t stream = resources_->stream;
    const absl::Status queued = state_->WithComm([&](ncclComm_t comm) -> absl::Status {
      cudaError_t error = cudaEventRecord(resources_->ready, compute);
      if (error == cudaSuccess) error = cudaStreamWaitEvent(stream, resources_->ready, 0);
      if (error != cudaSuccess) {
        cudaGetLastError();
        return CudaStatus(error, "ordering it after the compute stream", device);
      }
      ncclResult_t result = launch(comm, stream);
      // Non-blocking NCCL may still be queuing the op (or connecting to
      // peers); the stream must not be used until it has.
      while (result == ncclInProgress) {
        if (state_->is_broken()) return state_->BrokenError();
        if (Clock::now() >= deadline) return state_->TimeoutError(what);
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        ncclResult_t async = ncclSuccess;
        result = ncclCommGetAsyncError(comm, &async);
        if (result == ncclSuccess) result = async;
      }
      if (result != ncclSuccess) return NcclStatus(result, "queuing it", comm);
      error = cudaEventRecord(done, stream);
      if (error != cudaSuccess) {
        cudaGetLastError();
        return CudaStatus(error, "recording its completion", device);
      }
      return absl::OkStatus();
    });
    if (!queued.ok()) {
      if (queued.code() == absl::StatusCode::kAborted) return Refuse(what, queued);
      return Fail(what, queued);
    }
    state_->Track(op);
    return std::make_shared<NcclWork>(state_, std::move(op), compute);
  }

  // The op was not issued because the communicator was already broken.
  static std::shared_ptr<Work> Refuse(const std::string& what, const absl::Status& broken) {
    return std::make_shared<FinishedWork>(absl::AbortedError(absl::StrCat(what, ": ", broken.message())));
  }

  // Issuing the op failed: that breaks the communicator.
  std::shared_ptr<Work> Fail(const std::string& what, const absl::Status& cause) {
    const absl::Status status = absl::StartsWith(cause.message(), what)
                                    ? cause
                                    : absl::Status(cause.code(), absl::StrCat(what, ": ", cause.message()));
    state_->Fail(status);
    return std::make_shared<FinishedWork>(status);
  }

  const NcclOptions options_;
  const std::shared_ptr<NcclCommState> state_;
  const std::unique_ptr<StreamResources> resources_;
  std::mutex issue_mu_;
  uint64_t next_sequence_ = 0;  // guarded by issue_mu_
  std::thread watchdog_;
};

absl::Status ValidateOptions(const NcclOptions& options, const RendezvousStore* store) {
  if (options.size < 1) return absl::InvalidArgumentError(absl::StrCat("nccl: size ", options.size, " < 1"));
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: rank ", options.rank, " not in [0, ", options.size, ")"));
  }
  if (options.device < 0) return absl::InvalidArgumentError(absl::StrCat("nccl: device ", options.device, " < 0"));
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("nccl: timeout must be positive");
  if (store == nullptr) return absl::InvalidArgumentError("nccl: no rendezvous store");
  return absl::OkStatus();
}

}  // namespace

absl::Status NcclBuildStatus() { return absl::OkStatus(); }

absl::StatusOr<int> NcclRuntimeVersion() {
  int version = 0;
  const ncclResult_t result = ncclGetVersion(&version);
  if (result != ncclSuccess) return NcclStatus(result, "nccl: ncclGetVersion", nullptr);
  return version;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options,
                                                                     std::shared_ptr<RendezvousStore> store) {
  absl::Status status = ValidateOptions(options, store.get());
  if (!status.ok()) return status;
  // The device first: a rank without a usable GPU says so at once, instead
  // of after its peers have waited for it.
  status = nccl_internal::CheckDeviceUsable(options.device);
  if (!status.ok()) return status;
  ScopedDevice scoped(options.device);  // NCCL binds to the current device
  if (!scoped.status().ok()) return scoped.status();

  auto resources = std::make_unique<StreamResources>();
  status = CreateStreamResources(options.device, resources.get());
  if (!status.ok()) return status;

  const std::string name =
      absl::StrCat("rank ", options.rank, " of ", options.size, ", CUDA device ", options.device);
  absl::StatusOr<ncclUniqueId> id = nccl_internal::ExchangeUniqueId(options, *store, name);
  if (!id.ok()) return id.status();
  // The id's key is in the generation's store from here on; reading it
  // fails once the coordinator has ended the generation (a peer died before
  // it joined), which ends this rank's wait for that peer.
  const std::string id_key = NcclUniqueIdKey(options.key_prefix);
  absl::StatusOr<ncclComm_t> comm = nccl_internal::InitNcclComm(options, *id, name, [&store, &id_key] {
    absl::Status on = GenerationStillOn(*store, id_key);
    if (on.ok()) return on;
    return absl::Status(on.code(), absl::StrCat("the generation's store says ", on.message()));
  });
  if (!comm.ok()) return comm.status();

  auto state = std::make_shared<NcclCommState>(*comm, options.device, options.timeout, name);
  return std::unique_ptr<Communicator>(new NcclCommunicator(options, std::move(state), std::move(resources)));
}

}  // namespace herd
