#include "client/unreachable.h"

#include <gtest/gtest.h>

namespace herd::client {
namespace {

TEST(UnreachableTest, NamesEveryAddressAndWhy) {
  EXPECT_EQ(CannotReach({"h1:7070", "h2:7070"}, "connection refused"),
            "cannot reach the coordinator at h1:7070, h2:7070: connection refused");
}

TEST(UnreachableTest, OneReasonWhenEveryAddressSaidTheSame) {
  EXPECT_EQ(WhatEachSaid({{"h1:7070", "connection refused"}, {"h2:7070", "connection refused"}}), "connection refused");
  EXPECT_EQ(WhatEachSaid({{"h1:7070", "connection refused"},
                          {"h2:7070", "not the leader; no coordinator leads now (etcd does not answer)"}}),
            "h1:7070: connection refused; h2:7070: not the leader; no coordinator leads now (etcd does not answer)");
}

TEST(UnreachableTest, GrpcsConnectFailureIsCutToItsCause) {
  EXPECT_EQ(ConnectFailureCause("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
                                "Failed to connect to remote host: Connection refused"),
            "connection refused");
  EXPECT_EQ(ConnectFailureCause("failed to connect to all addresses; last error: UNAVAILABLE: ipv6:[::1]:7070: "
                                "Socket closed"),
            "socket closed");
  EXPECT_EQ(ConnectFailureCause("not the leader; the leader is h2:7070"), "not the leader; the leader is h2:7070");
  EXPECT_EQ(ConnectFailureCause("Deadline Exceeded"), "Deadline Exceeded");
  EXPECT_TRUE(IsConnectFailure("failed to connect to all addresses; last error: UNKNOWN: x: Connection refused"));
  EXPECT_FALSE(IsConnectFailure("state change not persisted: etcd txn failed"));
}

TEST(UnreachableTest, AFailedConnectIsKeptFromTheFirstPassAndOtherAnswersReplaceIt) {
  const std::string refused =
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: "
      "Connection refused";
  const std::string shut =
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:2: tcp handshaker shutdown";
  AddressAnswers answers;
  answers.Note("a:1", refused);
  answers.Note("b:2", refused);
  answers.Note("a:1", shut);
  EXPECT_EQ(answers.Reason(), "connection refused");
  answers.Note("b:2", "not the leader; no coordinator leads now (etcd does not answer)");
  answers.Note("a:1", refused);
  EXPECT_EQ(answers.Reason(),
            "a:1: connection refused; b:2: not the leader; no coordinator leads now (etcd does not answer)");
}

}  // namespace
}  // namespace herd::client
