#include "bench/gloo_direct.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <climits>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/comm/gloo_store_adapter.h"

namespace herd::bench {
namespace {

template <typename Fn>
absl::Status Catch(const std::string& what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace

namespace {

absl::StatusOr<std::shared_ptr<gloo::rendezvous::Context>> ConnectContext(int rank, int world,
                                                                          std::shared_ptr<RendezvousStore> store,
                                                                          const std::string& key_prefix,
                                                                          std::chrono::milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(timeout);
  absl::Status status = Catch("direct gloo rendezvous", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    GlooStoreAdapter adapter(std::move(store), key_prefix, timeout);
    context->connectFullMesh(adapter, device);
  });
  if (!status.ok()) return status;
  return context;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DirectGloo>> DirectGloo::Connect(int rank, int world,
                                                                std::shared_ptr<RendezvousStore> store,
                                                                const std::string& key_prefix,
                                                                std::chrono::milliseconds timeout, int stripes) {
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts;
  for (int s = 0; s < std::max(stripes, 1); ++s) {
    auto context = ConnectContext(rank, world, store, absl::StrCat(key_prefix, s, "/"), timeout);
    if (!context.ok()) return context.status();
    contexts.push_back(*std::move(context));
  }
  auto chunked = ConnectContext(rank, world, store, absl::StrCat(key_prefix, "chunked/"), timeout);
  if (!chunked.ok()) return chunked.status();
  return std::unique_ptr<DirectGloo>(new DirectGloo(std::move(contexts), *std::move(chunked), timeout));
}

absl::Status DirectGloo::RingOn(size_t context, float* data, size_t count, size_t max_segment_bytes) {
  return Catch("direct gloo ring all-reduce", [&] {
    gloo::AllreduceOptions options(contexts_[context]);
    options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    options.setOutput(data, count);
    options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    options.setTag(next_tags_[context]++);
    options.setTimeout(timeout_);
    if (max_segment_bytes > 0) options.setMaxSegmentSize(max_segment_bytes);
    gloo::allreduce(options);
  });
}

absl::Status DirectGloo::Ring(float* data, size_t count, size_t max_segment_bytes) {
  return RingOn(0, data, count, max_segment_bytes);
}

absl::Status DirectGloo::StripedRing(float* data, size_t count, int stripes, size_t max_segment_bytes) {
  if (stripes < 1 || static_cast<size_t>(stripes) > contexts_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(stripes, " stripes but ", contexts_.size(), " contexts"));
  }
  const size_t per_stripe = (count + stripes - 1) / stripes;
  std::vector<absl::Status> results(stripes);
  std::vector<std::thread> threads;
  for (int s = 1; s < stripes; ++s) {
    const size_t begin = std::min(count, s * per_stripe);
    const size_t length = std::min(count, begin + per_stripe) - begin;
    threads.emplace_back([&, s, begin, length] {
      if (length > 0) results[s] = RingOn(s, data + begin, length, max_segment_bytes);
    });
  }
  results[0] = RingOn(0, data, std::min(count, per_stripe), max_segment_bytes);
  for (auto& thread : threads) thread.join();
  for (const absl::Status& status : results) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status DirectGloo::RingChunked(float* data, size_t count) {
  if (count > static_cast<size_t>(INT_MAX / sizeof(float))) {
    return absl::InvalidArgumentError("AllreduceRingChunked counts bytes in an int");
  }
  return Catch("direct gloo AllreduceRingChunked", [&] {
    if (chunked_ == nullptr || chunked_data_ != data || chunked_count_ != count) {
      chunked_.reset();  // its buffers hold slots on the pairs: release them first
      chunked_ = std::make_unique<gloo::AllreduceRingChunked<float>>(chunked_context_, std::vector<float*>{data},
                                                                     static_cast<int>(count));
      chunked_data_ = data;
      chunked_count_ = count;
    }
    chunked_->run();
  });
}

}  // namespace herd::bench
