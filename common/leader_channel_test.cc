#include "common/leader_channel.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/grpc_serving.h"
#include "common/leader_redirect.h"

namespace herd {
namespace {

using ::testing::HasSubstr;

TEST(ParseCoordinatorAddresses, SplitsTrimsAndNamesABadEntry) {
  auto parsed = ParseCoordinatorAddresses("h1:7070, h2:7071");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, (std::vector<std::string>{"h1:7070", "h2:7071"}));
  EXPECT_EQ(*ParseCoordinatorAddresses("127.0.0.1:7070"), std::vector<std::string>{"127.0.0.1:7070"});
  auto bad = ParseCoordinatorAddresses("h1:7070,h2");
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"h2\""));
  EXPECT_FALSE(ParseCoordinatorAddresses("h1:7070,,h2:7070").ok());
  EXPECT_FALSE(ParseCoordinatorAddresses("h1:0").ok());
  EXPECT_FALSE(ParseCoordinatorAddresses("h1:7070;h2:7070").ok());
  EXPECT_TRUE(ParseCoordinatorAddresses("[::1]:7070,coordinator-0.herd:7070").ok());
  auto twice = ParseCoordinatorAddresses("h1:1,h1:1");
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("twice"));
}

TEST(NextAddress, FollowsAHintElseTheList) {
  const std::vector<std::string> list{"a:1", "b:1", "c:1"};
  const grpc::Status unavailable(grpc::StatusCode::UNAVAILABLE, "x");
  EXPECT_EQ(NextAddress(list, "a:1", unavailable, "c:1"), "c:1");
  EXPECT_EQ(NextAddress(list, "a:1", unavailable, "z:9"), "z:9");  // the leader may be outside the list
  EXPECT_EQ(NextAddress(list, "a:1", unavailable, ""), "b:1");
  EXPECT_EQ(NextAddress(list, "c:1", unavailable, ""), "a:1");
  EXPECT_EQ(NextAddress(list, "z:9", unavailable, ""), "a:1");
  EXPECT_EQ(NextAddress(list, "a:1", unavailable, "a:1"), "b:1");  // names itself: no loop
  const grpc::Status late(grpc::StatusCode::DEADLINE_EXCEEDED, "x");
  EXPECT_EQ(NextAddress(list, "b:1", late, ""), "c:1");
}

// A follower: every method answers "not the leader" (naming `leader`).
struct Follower {
  explicit Follower(const std::string& leader) {
    service.SetLeader(leader, "");
    grpc::ServerBuilder builder;
    builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
    builder.RegisterCallbackGenericService(&service);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    server = builder.BuildAndStart();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  NotLeaderService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// A leader: it serves (the standard health service answers SERVING).
struct Leader {
  Leader() {
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(&unknown_methods);  // a server needs a service
    auto started = BuildAndStartServer(builder, "127.0.0.1:0", grpc::InsecureServerCredentials());
    server = std::move(started->server);
    port = started->port;
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  grpc::CallbackGenericService unknown_methods;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// A port nothing listens on.
std::string DeadAddress() {
  Leader gone;
  std::string address = gone.address();
  gone.server->Shutdown();
  gone.server->Wait();
  return address;
}

std::unique_ptr<grpc::ClientContext> ShortCall() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return context;
}

grpc::Status Probe(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context) {
  bool serving = false;
  return CallHealthCheck(channel, "", context, &serving);
}

TEST(LeaderChannel, AFollowerSendsTheCallToTheLeaderItNames) {
  Leader leader;
  Follower follower(leader.address());
  auto channel = LeaderChannel::Open(follower.address() + "," + leader.address(), {});
  ASSERT_TRUE(channel.ok()) << channel.status();

  // The follower's own answer: UNAVAILABLE, the leader in the trailers and the text.
  grpc::ClientContext direct;
  grpc::Status refused = Probe((*channel)->ChannelTo(follower.address()), &direct);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(LeaderHint(direct), leader.address());
  EXPECT_EQ(refused.error_message(), "not the leader; the leader is " + leader.address());
  // Alive all the same: a liveness probe asks for kLivenessService.
  auto alive = CheckHealth((*channel)->ChannelTo(follower.address()), kLivenessService, std::chrono::seconds(5));
  ASSERT_TRUE(alive.ok()) << alive.status();
  EXPECT_TRUE(*alive);

  std::vector<std::string> called;
  grpc::Status status = (*channel)->Call(ShortCall, [&](const auto& to, grpc::ClientContext* context) {
    called.push_back((*channel)->current_address());
    return Probe(to, context);
  });
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(called, (std::vector<std::string>{follower.address(), leader.address()}));
  EXPECT_EQ((*channel)->current_address(), leader.address());  // the next call goes there at once
}

TEST(LeaderChannel, ADeadAddressPassesTheTurnToTheNext) {
  Leader leader;
  const std::string dead = DeadAddress();
  auto channel = LeaderChannel::Open(dead + "," + leader.address(), {});
  ASSERT_TRUE(channel.ok()) << channel.status();
  grpc::Status status = (*channel)->Call(ShortCall, Probe);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ((*channel)->current_address(), leader.address());
}

TEST(LeaderChannel, GivesUpNamingEveryAddressTried) {
  const std::string dead = DeadAddress();
  Follower follower("");  // nobody leads
  auto channel = LeaderChannel::Open(dead + "," + follower.address(), {});
  ASSERT_TRUE(channel.ok()) << channel.status();
  LeaderCallPolicy policy;
  policy.passes = 3;
  policy.first_pause = std::chrono::milliseconds(1);
  int calls = 0;
  grpc::Status status = (*channel)->Call(
      ShortCall,
      [&](const auto& to, grpc::ClientContext* context) {
        ++calls;
        return Probe(to, context);
      },
      policy);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(calls, 6);  // bounded: each address once a pass
  EXPECT_THAT(status.error_message(), HasSubstr(dead + ": "));
  const std::string follower_said = follower.address() + ": not the leader";
  EXPECT_EQ(status.error_message().find(follower_said), status.error_message().rfind(follower_said));  // once
  EXPECT_THAT(status.error_message(), HasSubstr(follower.address() + ": not the leader; no coordinator leads now"));
}

TEST(LeaderChannel, AnAnswerThatIsNotUnavailableIsFinal) {
  Leader leader;
  auto channel = LeaderChannel::Open(leader.address(), {});
  ASSERT_TRUE(channel.ok());
  int calls = 0;
  grpc::Status status = (*channel)->Call(ShortCall, [&](const auto&, grpc::ClientContext*) {
    ++calls;
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
  });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(calls, 1);
}

// A call that ran out of time leaves its connection behind: the next call
// to the same address goes over a new channel (a fresh TCP connection, not
// one stuck in retransmission backoff), and that one works.
TEST(LeaderChannel, ACallThatRanOutOfTimeGetsAFreshConnectionNextTime) {
  Leader leader;
  auto channel = LeaderChannel::Open(leader.address(), {});
  ASSERT_TRUE(channel.ok());
  const std::shared_ptr<grpc::Channel> first = (*channel)->ChannelTo(leader.address());
  grpc::Status late = (*channel)->Call(ShortCall, [&](const auto&, grpc::ClientContext*) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
  });
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  const std::shared_ptr<grpc::Channel> second = (*channel)->ChannelTo(leader.address());
  EXPECT_NE(second, first);
  EXPECT_TRUE((*channel)->Call(ShortCall, Probe).ok());
  EXPECT_EQ((*channel)->ChannelTo(leader.address()), second);  // kept while it answers
}

TEST(LeaderChannel, RefusesABadList) {
  auto channel = LeaderChannel::Open("h1:7070;h2:7070", {});
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd
