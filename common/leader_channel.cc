#include "common/leader_channel.h"

#include <algorithm>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/leader_redirect.h"

namespace herd {
namespace {

// A name, an IPv4 address, or an IPv6 one in brackets.
bool ValidHost(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return std::all_of(host.begin() + 1, host.end() - 1, [](char c) { return absl::ascii_isxdigit(c) || c == ':'; });
  }
  return std::all_of(host.begin(), host.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '_'; });
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseCoordinatorAddresses(const std::string& list) {
  std::vector<std::string> addresses;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    const std::string address(absl::StripAsciiWhitespace(entry));
    const size_t colon = address.rfind(':');
    int port = 0;
    if (address.empty() || colon == std::string::npos || colon == 0 || !ValidHost(address.substr(0, colon)) ||
        !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("coordinator address \"", address, "\" in \"", list,
                                                     "\" is not HOST:PORT (several are separated by commas)"));
    }
    if (std::find(addresses.begin(), addresses.end(), address) != addresses.end()) {
      return absl::InvalidArgumentError(absl::StrCat("coordinator address ", address, " is given twice in \"", list,
                                                     "\""));
    }
    addresses.push_back(address);
  }
  return addresses;
}

bool ShouldTryElsewhere(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

std::string NextAddress(const std::vector<std::string>& addresses, const std::string& failed,
                        const grpc::Status& status, const std::string& hint) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !hint.empty() && hint != failed) return hint;
  auto at = std::find(addresses.begin(), addresses.end(), failed);
  if (at == addresses.end()) return addresses.front();
  return ++at == addresses.end() ? addresses.front() : *at;
}

absl::StatusOr<std::shared_ptr<LeaderChannel>> LeaderChannel::Open(const std::string& addresses,
                                                                    const TlsOptions& tls) {
  auto parsed = ParseCoordinatorAddresses(addresses);
  if (!parsed.ok()) return parsed.status();
  std::shared_ptr<LeaderChannel> channel(new LeaderChannel(*std::move(parsed), tls));
  // Fails here, not at the first call, on bad TLS files.
  auto first = MakeChannel(channel->addresses_.front(), tls);
  if (!first.ok()) return first.status();
  absl::MutexLock lock(&channel->mu_);
  channel->channels_[channel->addresses_.front()] = *std::move(first);
  return channel;
}

std::shared_ptr<LeaderChannel> LeaderChannel::Over(std::shared_ptr<grpc::Channel> channel) {
  std::shared_ptr<LeaderChannel> over(new LeaderChannel({"channel"}, {}));
  absl::MutexLock lock(&over->mu_);
  over->remakeable_ = false;
  over->channels_["channel"] = std::move(channel);
  return over;
}

std::string LeaderChannel::current_address() {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::shared_ptr<grpc::Channel> LeaderChannel::current() { return ChannelTo(current_address()); }

std::shared_ptr<grpc::Channel> LeaderChannel::ChannelTo(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto known = channels_.find(address);
  if (known != channels_.end()) return known->second;
  // TLS files were read once in Open; should they fail now, the call fails
  // and names this address.
  auto made = MakeChannel(address, tls_);
  if (!made.ok()) return nullptr;
  channels_[address] = *made;
  return *made;
}

void LeaderChannel::Forget(const std::string& address, const std::shared_ptr<grpc::Channel>& channel) {
  absl::MutexLock lock(&mu_);
  if (!remakeable_ || channel == nullptr) return;
  auto known = channels_.find(address);
  if (known != channels_.end() && known->second == channel) channels_.erase(known);
}

void LeaderChannel::Learn(const std::string& address, const grpc::Status& status,
                          const grpc::ClientContext& context) {
  if (!ShouldTryElsewhere(status)) return;
  const std::string next = NextAddress(addresses_, address, status, LeaderHint(context));
  absl::MutexLock lock(&mu_);
  // Another thread may have moved on already: only the caller that used the
  // current address moves it.
  if (current_ == address) current_ = next;
}

grpc::Status LeaderChannel::Call(const NewContext& new_context, const Attempt& attempt,
                                 const LeaderCallPolicy& policy) {
  // Each address once, in the order first tried, with what it said last.
  std::vector<std::pair<std::string, std::string>> tried;
  std::chrono::milliseconds pause = policy.first_pause;
  for (int pass = 0; pass < std::max(policy.passes, 1); ++pass) {
    if (pass > 0) {
      std::this_thread::sleep_for(pause);  // a retry delay, not a wait for an event
      pause = std::min(pause * 2, policy.max_pause);
    }
    std::set<std::string> visited;
    for (std::string address = current_address(); visited.insert(address).second; address = current_address()) {
      std::shared_ptr<grpc::Channel> channel = ChannelTo(address);
      std::unique_ptr<grpc::ClientContext> context = new_context();
      grpc::Status status = channel == nullptr
                                ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "cannot make a channel to it")
                                : attempt(channel, context.get());
      if (!ShouldTryElsewhere(status)) return status;
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) Forget(address, channel);
      Learn(address, status, *context);
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !policy.retry_after_deadline) return status;
      auto said = std::find_if(tried.begin(), tried.end(), [&](const auto& entry) { return entry.first == address; });
      if (said == tried.end()) said = tried.insert(tried.end(), {address, ""});
      said->second = status.error_message();
    }
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("no coordinator answered as the leader; tried ",
                                   absl::StrJoin(tried, "; ", absl::PairFormatter(": "))));
}

}  // namespace herd
