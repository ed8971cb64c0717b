#include "client/unreachable.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace herd::client {

std::string CannotReach(const std::vector<std::string>& addresses, const std::string& why) {
  return absl::StrCat("cannot reach the coordinator at ", absl::StrJoin(addresses, ", "), ": ", why);
}

std::string WhatEachSaid(const std::vector<std::pair<std::string, std::string>>& said) {
  if (said.empty()) return "no address was tried";
  bool same = true;
  for (const auto& [address, message] : said) same = same && message == said.front().second;
  if (same) return said.front().second;
  return absl::StrJoin(said, "; ", absl::PairFormatter(": "));
}

namespace {

constexpr char kConnectFailure[] = "failed to connect to all addresses; last error: ";

}  // namespace

bool IsConnectFailure(const std::string& message) { return absl::StartsWith(message, kConnectFailure); }

void AddressAnswers::Note(const std::string& address, const std::string& message) {
  const bool connect_failed = IsConnectFailure(message);
  auto answer = std::find_if(answers_.begin(), answers_.end(), [&](const Answer& a) { return a.address == address; });
  if (answer == answers_.end()) answer = answers_.insert(answers_.end(), Answer{address, "", false});
  if (answer->connect_failed && connect_failed) return;
  answer->why = ConnectFailureCause(message);
  answer->connect_failed = connect_failed;
}

std::string AddressAnswers::Reason() const {
  std::vector<std::pair<std::string, std::string>> said;
  for (const Answer& answer : answers_) said.emplace_back(answer.address, answer.why);
  return WhatEachSaid(said);
}

std::string ConnectFailureCause(const std::string& message) {
  if (!IsConnectFailure(message)) return message;
  const size_t last = message.rfind(": ");
  std::string cause = message.substr(last + 2);
  if (cause.empty()) return message;
  // "Connection refused" reads as a sentence's start; after "A: " it is not.
  if (cause.size() > 1 && std::isupper(static_cast<unsigned char>(cause[0])) &&
      std::islower(static_cast<unsigned char>(cause[1]))) {
    cause[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(cause[0])));
  }
  return cause;
}

}  // namespace herd::client
