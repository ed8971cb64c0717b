// How `herd` says that no coordinator address answered:
// "cannot reach the coordinator at A, B: <why>", one line a person can act on.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace herd::client {

// "cannot reach the coordinator at A, B: WHY".
std::string CannotReach(const std::vector<std::string>& addresses, const std::string& why);

// What each address said (in the order tried) as one reason: said once when
// every address said the same, else "A: ...; B: ...".
std::string WhatEachSaid(const std::vector<std::pair<std::string, std::string>>& said);

// Collects what each address answered, in the order first tried, over
// several passes: the last answer counts, except that a failed connect is
// kept from the first pass. A retry's connect failure often carries gRPC's
// own words ("tcp handshaker shutdown") where the first one says why
// ("connection refused").
class AddressAnswers {
 public:
  // `message`: the failed call's message as gRPC gave it.
  void Note(const std::string& address, const std::string& message);
  // WhatEachSaid over the answers, connect failures cut to their cause.
  std::string Reason() const;

 private:
  struct Answer {
    std::string address;
    std::string why;
    bool connect_failed = false;
  };
  std::vector<Answer> answers_;
};

// Whether `message` is gRPC's for an address it could not connect to (not an
// answer from the server).
bool IsConnectFailure(const std::string& message);

// gRPC's message for an address it could not connect to ("failed to connect
// to all addresses; last error: UNKNOWN: ipv4:HOST:PORT: Failed to connect to
// remote host: Connection refused") cut to its cause ("connection refused"):
// the address is named already. Any other message is returned as it is.
std::string ConnectFailureCause(const std::string& message);

}  // namespace herd::client
