// A Communicator that passes every call to another one: the base of the
// decorators that change a little of what a communicator does (how a
// subgroup's failures name their peer, a test's injected fault). Every
// collective goes through Issue, so a decorator that changes collectives
// overrides that one hook and a new collective needs an edit here only.
#pragma once

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "worker/comm/communicator.h"

namespace herd {

class ForwardingCommunicator : public Communicator {
 public:
  // `inner` (not owned) must outlive this.
  explicit ForwardingCommunicator(Communicator* inner) : inner_(inner) {}

  int rank() const override;
  int size() const override;
  std::chrono::milliseconds timeout() const override;
  std::string backend() const override;
  std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) override;
  std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) override;
  std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) override;
  std::shared_ptr<Work> BarrierAsync() override;
  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) override;
  RangeLayout ReduceScatterLayout(size_t count, DataType type) const override;
  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) override;
  std::shared_ptr<void> AllocateAllReduceBuffer(size_t bytes) override;

 protected:
  using Issuer = absl::FunctionRef<std::shared_ptr<Work>()>;
  // Every collective above: `issue` hands it to the inner communicator and
  // returns its Work. Returns that by default.
  virtual std::shared_ptr<Work> Issue(Issuer issue) { return issue(); }

 private:
  Communicator* const inner_;
};

}  // namespace herd
