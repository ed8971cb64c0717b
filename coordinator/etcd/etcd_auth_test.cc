// The coordinator authenticates to etcd as an etcd user, as an operator who
// runs etcd with authentication on expects: a real etcd member with a root
// user and herd's users made through etcd's Auth API (as etcdctl makes
// them), tokens that expire after 2 s of disuse (--auth-token-ttl=2). The
// store leads and writes as its user; tokens that expire or that a member's
// restart forgets are renewed, once, and the calls go on; a wrong password,
// no user, or a role that may not write herd's prefix stop the start with a
// message naming the user, the endpoint or the prefix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "coordinator/etcd/etcd_access_check.h"
#include "coordinator/etcd/etcd_credentials.h"
#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/leadership.h"
#include "coordinator/etcd/local_etcd.h"
#include "coordinator/etcd/testing/etcd_suite.h"
#include "coordinator/store_opening.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/test_certificates.h"

namespace herd::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// What etcd lets the users do: herd reads and writes under kPrefix, reader
// only reads there, stranger reads and writes elsewhere.
constexpr char kPrefix[] = "/herd-auth/";
constexpr char kHerdPassword[] = "s3cret pass";  // a space is part of it
constexpr char kTokenTtl[] = "--auth-token-ttl=2";

std::vector<LocalEtcdUser> Users() {
  return {{"herd", kHerdPassword, kPrefix, authpb::Permission::READWRITE},
          {"reader", "reader-pass", kPrefix, authpb::Permission::READ},
          {"stranger", "stranger-pass", "/elsewhere/", authpb::Permission::READWRITE},
          {"rotating", "first-pass", kPrefix, authpb::Permission::READWRITE}};
}

ClusterState OneJob(const std::string& id, ChangeSet* changes) {
  ClusterState state;
  v1::JobSpec spec;
  spec.set_name(id);
  AddPendingJob(state, id, spec, 1, changes);
  return state;
}

class EtcdAuthTest : public EtcdSuite {
 protected:
  static void SetUpTestSuite() {
    StartMember("etcd-auth", []() -> absl::StatusOr<std::unique_ptr<LocalEtcd>> {
      auto etcd = LocalEtcd::Start(1, nullptr, {kTokenTtl});
      if (!etcd.ok()) return etcd.status();
      if (absl::Status enabled = (*etcd)->EnableAuth("root-pass", Users()); !enabled.ok()) return enabled;
      return etcd;
    });
  }

  // A password file as the operator writes it (echo adds a line break).
  static std::string PasswordFile(const std::string& name, const std::string& password) {
    const std::string path = File(name);
    std::ofstream(path) << password << "\n";
    chmod(path.c_str(), 0600);
    return path;
  }

  static StoreOptions Options(const std::string& prefix, const std::string& user, const std::string& password) {
    StoreOptions options = StoreOn(prefix);
    options.etcd_user = user;
    if (!user.empty()) options.etcd_password_file = PasswordFile(user + "-password", password);
    return options;
  }

  static std::unique_ptr<EtcdClient> Client(const std::string& endpoint, const std::string& user,
                                            const std::string& password, const TlsOptions& tls = {}) {
    auto client = EtcdClient::Connect({endpoint}, 5, tls, EtcdCredentials{user, password});
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
};

// With its password the store leads and writes; what it wrote is there for
// another client of the same user, and etcd refuses a client without one
// (authentication is really on).
TEST_F(EtcdAuthTest, TheStoreLeadsAndWritesAsItsUser) {
  auto opened = OpenStore(Options(std::string(kPrefix) + "leads/", "herd", kHerdPassword));
  ASSERT_TRUE(opened.ok()) << opened.status();
  ChangeSet changes;
  ClusterState state = OneJob("job-1", &changes);
  ASSERT_TRUE(opened->store->Save(state, changes).ok());

  EtcdStateStore reader(std::shared_ptr<EtcdClient>(Client(Endpoint(), "herd", kHerdPassword)),
                        std::string(kPrefix) + "leads/");
  auto loaded = reader.Load(2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->jobs.count("job-1"), 1u);

  auto anonymous = EtcdClient::Connect({Endpoint()});
  ASSERT_TRUE(anonymous.ok());
  etcdserverpb::RangeRequest range;
  range.set_key(kPrefix);
  auto refused = (*anonymous)->Range(range);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("etcd requires authentication"));
}

TEST_F(EtcdAuthTest, AWrongPasswordIsRefusedAtStart) {
  ExpectRefused(Options(std::string(kPrefix) + "wrong/", "herd", "not the password"),
                absl::StatusCode::kUnauthenticated,
                {"authentication failed", "etcd user \"herd\"", Endpoint(), "--etcd-password-file"});
}

TEST_F(EtcdAuthTest, NoUserWhereEtcdRequiresOneIsRefusedAtStart) {
  ExpectRefused(Options(std::string(kPrefix) + "anonymous/", "", ""), absl::StatusCode::kUnauthenticated,
                {"etcd requires authentication", "--etcd-user", Endpoint()});
}

TEST_F(EtcdAuthTest, AReadOnlyRoleIsRefusedAtStartNamingThePrefix) {
  const std::string prefix = std::string(kPrefix) + "read-only/";
  ExpectRefused(Options(prefix, "reader", "reader-pass"), absl::StatusCode::kPermissionDenied,
                {"etcd user reader may not write under the key prefix " + prefix, "permission denied"});
}

TEST_F(EtcdAuthTest, ARoleForAnotherPrefixIsRefusedAtStartNamingThePrefix) {
  const std::string prefix = std::string(kPrefix) + "foreign/";
  ExpectRefused(Options(prefix, "stranger", "stranger-pass"), absl::StatusCode::kPermissionDenied,
                {"etcd user stranger may not read under the key prefix " + prefix, "permission denied"});
}

// An etcd that does not answer is waited for (the campaign retries), not
// refused: the start-up check passes it.
TEST_F(EtcdAuthTest, AnUnreachableEtcdIsNotARefusal) {
  auto client = EtcdClient::Connect({"127.0.0.1:" + std::to_string(testing::LocalCluster::FreeLocalPort())}, 2, {},
                                    EtcdCredentials{"herd", kHerdPassword});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(CheckEtcdAccess(**client, kPrefix).ok());
  etcdserverpb::RangeRequest range;
  range.set_key(kPrefix);
  auto failed = (*client)->Range(range);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  EXPECT_FALSE(EtcdRefusedAccess(failed.status())) << failed.status();
}

// A user given to an etcd whose authentication is off is not used (etcd
// says so; a warning is logged): the store works without a token.
TEST_F(EtcdAuthTest, AUserForAnEtcdWithoutAuthenticationIsNotNeeded) {
  auto plain = LocalEtcd::Start(1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  StoreOptions options = Options(std::string(kPrefix) + "no-auth/", "herd", kHerdPassword);
  options.store = "etcd://" + (*plain)->endpoints()[0];
  auto opened = OpenStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ChangeSet changes;
  ClusterState state = OneJob("job-1", &changes);
  EXPECT_TRUE(opened->store->Save(state, changes).ok());
}

// A leader whose token expired (2 s unused: lease renewals do not use it)
// writes again: the refused call authenticates once more and is made again.
// Calls that find it expired together share one new token.
TEST_F(EtcdAuthTest, AnExpiredTokenIsRenewedOnceAndTheWriteSucceeds) {
  const std::string prefix = std::string(kPrefix) + "expiry/";
  std::shared_ptr<EtcdClient> client = Client(Endpoint(), "herd", kHerdPassword);
  ASSERT_NE(client, nullptr);
  LeadershipOptions leadership;
  leadership.key = prefix + "leader";
  leadership.identity = "expiry";
  leadership.lease_seconds = 3;
  auto leading = EtcdLeadership::Campaign(client, leadership);
  ASSERT_TRUE(leading.ok()) << leading.status();
  EtcdStateStore store(client, prefix);
  store.FenceWith((*leading)->fence());
  ChangeSet first;
  ClusterState state = OneJob("job-1", &first);
  ASSERT_TRUE(store.Save(state, first).ok());
  const int issued = client->authentications();
  ASSERT_GE(issued, 1);

  // etcd forgets a simple token after its TTL of disuse, checked each second.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ChangeSet second;
  AddPendingJob(state, "job-2", {}, 2, &second);
  absl::Status saved = store.Save(state, second);
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_EQ(client->authentications(), issued + 1);
  EXPECT_FALSE((*leading)->lost());

  std::this_thread::sleep_for(std::chrono::seconds(4));
  std::vector<std::thread> readers;
  std::atomic<int> failed{0};
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      etcdserverpb::RangeRequest range;
      range.set_key(store.JobKey("job-2"));
      if (!client->Range(range).ok()) ++failed;
    });
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(client->authentications(), issued + 2) << "calls that found the token expired together";
}

// The operator rotates the password (in etcd, then in the Secret behind
// the password file): once the token expires, the client authenticates
// with the file's new password, without a restart.
TEST_F(EtcdAuthTest, ARotatedPasswordFileIsReadAgainForTheNextToken) {
  const std::string file = PasswordFile("rotating-password", "first-pass");
  auto credentials = ReadEtcdCredentials("rotating", file);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  auto client = EtcdClient::Connect({Endpoint()}, 5, {}, *credentials);
  ASSERT_TRUE(client.ok()) << client.status();
  etcdserverpb::PutRequest put;
  put.set_key(std::string(kPrefix) + "rotating/key");
  ASSERT_TRUE((*client)->Put(put).ok());

  absl::Status changed = Etcd().ChangePassword("root-pass", "rotating", "second-pass");
  ASSERT_TRUE(changed.ok()) << changed;
  PasswordFile("rotating-password", "second-pass");
  // etcd forgets a simple token after its TTL of disuse, checked each second.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  auto written = (*client)->Put(put);
  EXPECT_TRUE(written.ok()) << written.status();
  EXPECT_EQ((*client)->authentications(), 2);
}

// A member's restart, and etcd forgetting every token (its authentication
// turned off and on again, as `etcdctl auth disable` and `auth enable`
// do): the leader's next write is made with a fresh token, and the
// standby's campaign, whose watch of the leader key etcd cancels for its
// token, watches again with a fresh one and takes over when the leader
// resigns. (A restart alone may keep tokens: etcd 3.4 replays the
// Authenticate calls of its log.)
TEST_F(EtcdAuthTest, ForgottenTokensAndARestartAreSurvivedByTheLeaderAndTheStandby) {
  auto etcd = LocalEtcd::Start(1);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  ASSERT_TRUE((*etcd)->EnableAuth("root-pass", Users()).ok());
  const std::string endpoint = (*etcd)->endpoints()[0];
  const std::string prefix = std::string(kPrefix) + "restart/";
  LeadershipOptions leadership;
  leadership.key = prefix + "leader";
  leadership.lease_seconds = 10;  // outlives the restart
  std::shared_ptr<EtcdClient> leader_client = Client(endpoint, "herd", kHerdPassword);
  std::shared_ptr<EtcdClient> standby_client = Client(endpoint, "herd", kHerdPassword);
  ASSERT_NE(leader_client, nullptr);
  ASSERT_NE(standby_client, nullptr);
  leadership.identity = "first";
  auto leading = EtcdLeadership::Campaign(leader_client, leadership);
  ASSERT_TRUE(leading.ok()) << leading.status();
  EtcdStateStore store(leader_client, prefix);
  store.FenceWith((*leading)->fence());
  ChangeSet first;
  ClusterState state = OneJob("job-1", &first);
  ASSERT_TRUE(store.Save(state, first).ok());

  std::atomic<bool> stop{false};
  absl::StatusOr<std::unique_ptr<EtcdLeadership>> standby = absl::UnknownError("not yet");
  LeadershipOptions standby_options = leadership;
  standby_options.identity = "second";
  absl::Notification following;  // the standby has its token and watches
  standby_options.on_follow = [&](const std::string& leader, const std::string&) {
    if (leader == "first" && !following.HasBeenNotified()) following.Notify();
  };
  std::thread campaign(
      [&] { standby = EtcdLeadership::Campaign(standby_client, standby_options, [&] { return stop.load(); }); });
  // Ends the campaign however the test ends (a failed assertion returns).
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Joiner() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } joiner{stop, campaign};
  ASSERT_TRUE(following.WaitForNotificationWithTimeout(absl::Seconds(10))) << "the standby never followed";
  ASSERT_EQ(standby_client->authentications(), 1);

  (*etcd)->Kill(0);
  (*etcd)->Restart(0);
  absl::Status serving = (*etcd)->AwaitServing(0);
  ASSERT_TRUE(serving.ok()) << serving;
  ChangeSet second;
  AddPendingJob(state, "job-2", {}, 2, &second);
  absl::Status saved = store.Save(state, second);
  EXPECT_TRUE(saved.ok()) << saved;

  const int issued = leader_client->authentications();
  absl::Status cycled = (*etcd)->CycleAuth("root-pass");
  ASSERT_TRUE(cycled.ok()) << cycled;
  ChangeSet third;
  AddPendingJob(state, "job-3", {}, 3, &third);
  saved = store.Save(state, third);
  EXPECT_TRUE(saved.ok()) << saved;
  EXPECT_EQ(leader_client->authentications(), issued + 1);

  leading->reset();  // resigns: the standby must see the key go and lead
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline && !standby.ok()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  campaign.join();
  ASSERT_TRUE(standby.ok()) << "the standby did not lead: " << standby.status();
  EXPECT_GE(standby_client->authentications(), 2) << "the standby's token was forgotten too";
  EtcdStateStore taken_over(standby_client, prefix);
  taken_over.FenceWith((*standby)->fence());
  auto loaded = taken_over.Load(3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->jobs.count("job-3"), 1u);
  ChangeSet fourth;
  AddPendingJob(*loaded, "job-4", {}, 4, &fourth);
  EXPECT_TRUE(taken_over.Save(*loaded, fourth).ok());
}

// The usual setup: TLS to etcd and a user on top (etcd then takes the
// user from the token, not from the client certificate).
TEST_F(EtcdAuthTest, AuthenticationWorksOverMutualTls) {
  const std::string pki = File("pki");
  std::filesystem::create_directories(pki);
  absl::Status made = testing::MakeCertificates(pki, {"coordinator"});
  ASSERT_TRUE(made.ok()) << made;
  const TlsOptions mutual{pki + "/ca.crt", pki + "/coordinator.crt", pki + "/coordinator.key"};
  LocalEtcdTls tls;
  tls.cert_file = pki + "/server.crt";
  tls.key_file = pki + "/server.key";
  tls.client_ca_file = pki + "/ca.crt";
  tls.client = mutual;
  auto etcd = LocalEtcd::Start(1, &tls);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  ASSERT_TRUE((*etcd)->EnableAuth("root-pass", Users()).ok());

  StoreOptions options = Options(std::string(kPrefix) + "tls/", "herd", kHerdPassword);
  options.store = "etcd://" + (*etcd)->endpoints()[0];
  options.etcd_tls = mutual;
  auto opened = OpenStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ChangeSet changes;
  ClusterState state = OneJob("job-1", &changes);
  EXPECT_TRUE(opened->store->Save(state, changes).ok());

  options.etcd_prefix = std::string(kPrefix) + "tls-wrong/";
  options.etcd_password_file = PasswordFile("tls-wrong", "wrong");
  auto refused = OpenStore(options);
  EXPECT_THAT(refused.status().message(), AllOf(HasSubstr("authentication failed"),
                                                HasSubstr("https://" + (*etcd)->endpoints()[0])));
}

// The real binary: it leads with --etcd-user and --etcd-password-file; a
// wrong password or a read-only role ends it at once with the message; a
// user without a password file is a usage error.
TEST_F(EtcdAuthTest, TheCoordinatorUsesItsEtcdUserFlags) {
  auto coordinator = [&](const std::string& name, const std::vector<std::string>& more) {
    return RunCoordinator(name, std::string(kPrefix) + name + "/", more);
  };
  auto leading = coordinator("binary-leads", {"--etcd-user=herd",
                                              "--etcd-password-file=" + PasswordFile("binary-herd", kHerdPassword)});
  ASSERT_TRUE(testing::WaitForFile(File("binary-leads.json"), std::chrono::seconds(20))) << leading->Log();
  EXPECT_THAT(testing::ReadFile(File("binary-leads.json")), HasSubstr("\"leading\":true"));

  auto wrong = coordinator("binary-wrong", {"--etcd-user=herd",
                                            "--etcd-password-file=" + PasswordFile("binary-wrong", "wrong")});
  std::optional<int> exited = wrong->Wait(kFailFast);
  ASSERT_TRUE(exited.has_value()) << "still running with a wrong password: " << wrong->Log();
  EXPECT_EQ(*exited, 1);
  EXPECT_THAT(wrong->Log(), AllOf(HasSubstr("authentication failed for etcd user \"herd\""), HasSubstr(Endpoint())));

  auto reader = coordinator("binary-reader", {"--etcd-user=reader",
                                              "--etcd-password-file=" + PasswordFile("binary-reader", "reader-pass")});
  exited = reader->Wait(kFailFast);
  ASSERT_TRUE(exited.has_value()) << "still running with a read-only role: " << reader->Log();
  EXPECT_EQ(*exited, 1);
  EXPECT_THAT(reader->Log(), AllOf(HasSubstr(std::string("may not write under the key prefix ") + kPrefix +
                                             "binary-reader/"),
                                   HasSubstr("permission denied")));

  auto half = coordinator("binary-half", {"--etcd-user=herd"});
  exited = half->Wait(kFailFast);
  ASSERT_TRUE(exited.has_value()) << half->Log();
  EXPECT_NE(*exited, 0);
  EXPECT_THAT(half->Log(), HasSubstr("--etcd-password-file"));
}

}  // namespace
}  // namespace herd::coordinator
