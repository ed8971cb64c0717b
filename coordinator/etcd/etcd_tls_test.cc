// The coordinator reaches etcd over TLS as etcd runs under Kubernetes: a
// real etcd member with https client URLs and --client-cert-auth, and
// certificates made by openssl for this test. The store works over mutual
// TLS; a missing client certificate, a wrong CA or an etcd without TLS stop
// the start at once with an error naming the endpoint and TLS; wrong files
// are named by their flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/local_etcd.h"
#include "coordinator/etcd/testing/etcd_suite.h"
#include "coordinator/store_opening.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/test_certificates.h"

namespace herd::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

class EtcdTlsTest : public EtcdSuite {
 protected:
  static void SetUpTestSuite() {
    StartMember("etcd-tls", []() -> absl::StatusOr<std::unique_ptr<LocalEtcd>> {
      // etcd's CA, with a client certificate for the coordinator; another
      // CA with a client certificate of its own.
      std::filesystem::create_directories(File("other"));
      if (absl::Status made = testing::MakeCertificates(Dir(), {"coordinator"}); !made.ok()) return made;
      if (absl::Status made = testing::MakeCertificates(File("other"), {"stranger"}); !made.ok()) return made;
      LocalEtcdTls tls;
      tls.cert_file = File("server.crt");
      tls.key_file = File("server.key");
      tls.client_ca_file = File("ca.crt");
      tls.client = MutualTls();
      return LocalEtcd::Start(1, &tls);
    });
  }

  static TlsOptions MutualTls() { return {File("ca.crt"), File("coordinator.crt"), File("coordinator.key")}; }

  static StoreOptions Options(const TlsOptions& tls, const std::string& prefix) {
    StoreOptions options = StoreOn(prefix);
    options.etcd_tls = tls;
    return options;
  }

  // Opens the store and expects a refused TLS connection, reported at once
  // with the endpoint and `why`.
  static void ExpectTlsRefused(const StoreOptions& options, const std::string& why) {
    ExpectRefused(options, absl::StatusCode::kUnavailable,
                  {"no member answered over TLS", "https://" + options.store.substr(7), why});
  }
};

// Over mutual TLS the store leads and what it saves is read back by another
// client.
TEST_F(EtcdTlsTest, TheStoreWorksOverMutualTls) {
  auto opened = OpenStore(Options(MutualTls(), "/mtls/"));
  ASSERT_TRUE(opened.ok()) << opened.status();
  ClusterState state;
  ChangeSet changes;
  v1::JobSpec spec;
  spec.set_name("over-tls");
  AddPendingJob(state, "job-1", spec, 1, &changes);
  ASSERT_TRUE(opened->store->Save(state, changes).ok());

  auto client = EtcdClient::Connect({"https://" + Endpoint()}, 5, MutualTls());
  ASSERT_TRUE(client.ok()) << client.status();
  EtcdStateStore reader(std::shared_ptr<EtcdClient>(*std::move(client)), "/mtls/");
  auto loaded = reader.Load(2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->jobs.count("job-1"), 1u);
  EXPECT_EQ(loaded->jobs.at("job-1").info.spec().name(), "over-tls");
}

TEST_F(EtcdTlsTest, WithoutAClientCertificateEtcdRefuses) {
  ExpectTlsRefused(Options({File("ca.crt"), "", ""}, "/no-cert/"), "refuses the client certificate");
}

TEST_F(EtcdTlsTest, AClientCertificateFromAnotherCaIsRefused) {
  ExpectTlsRefused(Options({File("ca.crt"), File("other/stranger.crt"), File("other/stranger.key")}, "/stranger/"),
                   "refuses the client certificate");
}

TEST_F(EtcdTlsTest, AServerCertificateFromAnotherCaIsRefused) {
  ExpectTlsRefused(Options({File("other/ca.crt"), File("coordinator.crt"), File("coordinator.key")}, "/wrong-ca/"),
                   "TLS handshake failed");
}

TEST_F(EtcdTlsTest, TlsToAnEtcdWithoutTlsIsRefused) {
  auto plain = LocalEtcd::Start(1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  StoreOptions options = Options(MutualTls(), "/plain/");
  options.store = "etcd://" + (*plain)->endpoints()[0];
  ExpectTlsRefused(options, "closed the connection in the TLS handshake");
}

// Members that are merely down are waited for (a standby campaigns until
// etcd returns): only a refused handshake stops the start.
TEST_F(EtcdTlsTest, AnUnreachableMemberIsNotATlsFailure) {
  auto client = EtcdClient::Connect({"127.0.0.1:" + std::to_string(testing::LocalCluster::FreeLocalPort())}, 2,
                                    MutualTls());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->CheckTlsHandshakes().ok());
  etcdserverpb::RangeRequest range;
  range.set_key("x");
  auto failed = (*client)->Range(range);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), Not(HasSubstr("TLS handshake failed")));
}

TEST_F(EtcdTlsTest, WrongFilesAndSchemesAreNamed) {
  auto refused = [](const TlsOptions& tls) { return OpenStore(Options(tls, "/flags/")).status(); };
  EXPECT_THAT(refused({File("ca.crt"), File("coordinator.crt"), ""}).message(),
              HasSubstr("--etcd-cert needs --etcd-key"));
  EXPECT_THAT(refused({File("ca.crt"), "", File("coordinator.key")}).message(),
              HasSubstr("--etcd-key needs --etcd-cert"));
  EXPECT_THAT(refused({File("absent.crt"), "", ""}).message(),
              AllOf(HasSubstr("--etcd-cacert " + File("absent.crt")), HasSubstr("cannot read")));
  EXPECT_THAT(refused({File("ca.crt"), File("coordinator.crt"), File("server.key")}).message(),
              AllOf(HasSubstr("--etcd-key " + File("server.key")), HasSubstr("is not the private key"),
                    HasSubstr("--etcd-cert " + File("coordinator.crt"))));
  StoreOptions sqlite;
  sqlite.store = "sqlite:" + File("state/coordinator.db");
  sqlite.etcd_tls = MutualTls();
  EXPECT_THAT(OpenStore(sqlite).status().message(), HasSubstr("for --store=etcd:// only"));
  auto https_without_tls = EtcdClient::Connect({"https://" + Endpoint()});
  EXPECT_THAT(std::string(https_without_tls.status().message()), HasSubstr("give --etcd-cacert"));
  auto http_with_tls = EtcdClient::Connect({"http://" + Endpoint()}, 5, MutualTls());
  EXPECT_THAT(std::string(http_with_tls.status().message()), HasSubstr("is plain http, but"));
}

// The real binary: over mutual TLS it leads; with the wrong CA it exits at
// once naming the endpoint and TLS; a certificate without its key is a
// usage error.
TEST_F(EtcdTlsTest, TheCoordinatorUsesItsEtcdTlsFlags) {
  auto coordinator = [&](const std::string& name, const std::string& ca, std::vector<std::string> more) {
    more.push_back("--etcd-cacert=" + ca);
    return RunCoordinator(name, "/" + name + "/", more);
  };
  const std::vector<std::string> client_pair = {"--etcd-cert=" + File("coordinator.crt"),
                                                "--etcd-key=" + File("coordinator.key")};
  auto leading = coordinator("leads", File("ca.crt"), client_pair);
  ASSERT_TRUE(testing::WaitForFile(File("leads.json"), std::chrono::seconds(20))) << leading->Log();
  EXPECT_THAT(testing::ReadFile(File("leads.json")), HasSubstr("\"leading\":true"));

  auto wrong_ca = coordinator("wrong-ca", File("other/ca.crt"), client_pair);
  const std::optional<int> exited = wrong_ca->Wait(kFailFast);
  ASSERT_TRUE(exited.has_value()) << "still running with the wrong CA: " << wrong_ca->Log();
  EXPECT_EQ(*exited, 1);
  EXPECT_THAT(wrong_ca->Log(), AllOf(HasSubstr("https://" + Endpoint()), HasSubstr("TLS handshake failed")));

  auto half_pair = coordinator("half-pair", File("ca.crt"), {"--etcd-cert=" + File("coordinator.crt")});
  const std::optional<int> refused = half_pair->Wait(kFailFast);
  ASSERT_TRUE(refused.has_value()) << half_pair->Log();
  EXPECT_NE(*refused, 0);
  EXPECT_THAT(half_pair->Log(), HasSubstr("--etcd-key"));
}

}  // namespace
}  // namespace herd::coordinator
