#include "worker/comm/gloo_store_adapter.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace herd {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<RendezvousStore> store, std::string key_prefix,
                                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), key_prefix_(std::move(key_prefix)), timeout_(timeout) {}

void GlooStoreAdapter::Fail(absl::Status status) {
  last_error_ = status;
  throw gloo::IoException(std::string(status.message()));
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  const std::string full_key = key_prefix_ + key;
  absl::Status status = store_->Set(full_key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    Fail(absl::Status(status.code(),
                      absl::StrCat("publishing this rank's address in the rendezvous store: ", status.message())));
  }
}

absl::Status GlooStoreAdapter::Fetch(const std::string& key, std::chrono::milliseconds timeout) {
  if (fetched_.count(key) > 0) return absl::OkStatus();
  const std::string full_key = key_prefix_ + key;
  std::string value;
  absl::Status status = store_->Get(full_key, timeout, &value);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("waiting for a peer's address in the rendezvous store: ", status.message()));
  }
  fetched_[key] = std::move(value);
  return absl::OkStatus();
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::Status status = Fetch(key, timeout_);
  if (!status.ok()) Fail(std::move(status));
  const std::string& value = fetched_.at(key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  // Gloo passes its context's timeout, which herd shortens while connecting
  // (ConnectTimeout): waiting for a peer to publish its address keeps ours.
  // One deadline for all keys: waiting for N peers must not take N timeouts.
  const auto deadline = std::chrono::steady_clock::now() + std::max(timeout, timeout_);
  for (const std::string& key : keys) {
    const auto left = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 deadline - std::chrono::steady_clock::now()));
    absl::Status status = Fetch(key, left);
    if (!status.ok()) Fail(std::move(status));
  }
}

}  // namespace herd
