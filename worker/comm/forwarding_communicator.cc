#include "worker/comm/forwarding_communicator.h"

namespace herd {

int ForwardingCommunicator::rank() const { return inner_->rank(); }
int ForwardingCommunicator::size() const { return inner_->size(); }
std::chrono::milliseconds ForwardingCommunicator::timeout() const { return inner_->timeout(); }
std::string ForwardingCommunicator::backend() const { return inner_->backend(); }

std::shared_ptr<Work> ForwardingCommunicator::AllReduceAsync(void* data, size_t count, DataType type) {
  return Issue([&] { return inner_->AllReduceAsync(data, count, type); });
}

std::shared_ptr<Work> ForwardingCommunicator::BroadcastAsync(void* data, size_t bytes, int root) {
  return Issue([&] { return inner_->BroadcastAsync(data, bytes, root); });
}

std::shared_ptr<Work> ForwardingCommunicator::AllGatherAsync(const void* in, size_t bytes, void* out) {
  return Issue([&] { return inner_->AllGatherAsync(in, bytes, out); });
}

std::shared_ptr<Work> ForwardingCommunicator::BarrierAsync() {
  return Issue([&] { return inner_->BarrierAsync(); });
}

std::shared_ptr<Work> ForwardingCommunicator::ReduceScatterAsync(const void* in, void* out, size_t block_count,
                                                                 DataType type) {
  return Issue([&] { return inner_->ReduceScatterAsync(in, out, block_count, type); });
}

RangeLayout ForwardingCommunicator::ReduceScatterLayout(size_t count, DataType type) const {
  return inner_->ReduceScatterLayout(count, type);
}

std::shared_ptr<Work> ForwardingCommunicator::ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) {
  return Issue([&] { return inner_->ReduceScatterInPlaceAsync(data, count, type); });
}

std::shared_ptr<void> ForwardingCommunicator::AllocateAllReduceBuffer(size_t bytes) {
  return inner_->AllocateAllReduceBuffer(bytes);
}

}  // namespace herd
