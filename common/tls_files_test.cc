// ReadTlsFiles on real files made by openssl: good pairs load, and every
// wrong file is refused naming its flag and its path.
#include "common/tls_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "tests/harness/test_certificates.h"

namespace herd {
namespace {

const TlsFlagNames kEtcdNames{"--etcd-cacert", "--etcd-cert", "--etcd-key"};

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/tls_files");
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
    const absl::Status made = testing::MakeCertificates(*dir_, {"client"});
    ASSERT_TRUE(made.ok()) << made;
    std::ofstream(*dir_ + "/not-pem.txt") << "hello\n";
  }
  static std::string File(const std::string& name) { return *dir_ + "/" + name; }

  static void ExpectRefused(const absl::StatusOr<TlsPem>& read, const std::vector<std::string>& named) {
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& part : named) {
      EXPECT_NE(read.status().message().find(part), std::string::npos)
          << "\"" << read.status().message() << "\" does not name " << part;
    }
  }

  static std::string* dir_;
};
std::string* TlsFilesTest::dir_ = nullptr;

TEST_F(TlsFilesTest, ReadsACaAndAMatchingPair) {
  auto read = ReadTlsFiles(File("ca.crt"), File("client.crt"), File("client.key"), kEtcdNames);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_NE(read->ca.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(read->cert.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(read->key.find("PRIVATE KEY"), std::string::npos);
  auto ca_only = ReadTlsFiles(File("ca.crt"), "", "", kEtcdNames);
  ASSERT_TRUE(ca_only.ok()) << ca_only.status();
  EXPECT_TRUE(ca_only->cert.empty());
}

TEST_F(TlsFilesTest, AMissingFileIsNamedByItsFlag) {
  ExpectRefused(ReadTlsFiles(File("absent.crt"), "", "", kEtcdNames),
                {"--etcd-cacert", File("absent.crt"), "cannot read", "No such file"});
  ExpectRefused(ReadTlsFiles(File("ca.crt"), File("absent.crt"), File("client.key"), kEtcdNames),
                {"--etcd-cert", File("absent.crt"), "cannot read"});
  ExpectRefused(ReadTlsFiles("", File("client.crt"), File("absent.key"), kEtcdNames),
                {"--etcd-key", File("absent.key"), "cannot read"});
}

TEST_F(TlsFilesTest, AnUnreadableFileIsNamedByItsFlag) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  const std::string key = File("unreadable.key");
  std::filesystem::copy_file(File("client.key"), key, std::filesystem::copy_options::overwrite_existing);
  chmod(key.c_str(), 0);
  ExpectRefused(ReadTlsFiles("", File("client.crt"), key, kEtcdNames), {"--etcd-key", key, "Permission denied"});
}

TEST_F(TlsFilesTest, ACertificateNeedsItsKeyAndTheOtherWayRound) {
  ExpectRefused(ReadTlsFiles(File("ca.crt"), File("client.crt"), "", kEtcdNames), {"--etcd-cert needs --etcd-key"});
  ExpectRefused(ReadTlsFiles(File("ca.crt"), "", File("client.key"), kEtcdNames), {"--etcd-key needs --etcd-cert"});
}

TEST_F(TlsFilesTest, AKeyOfAnotherCertificateIsRefused) {
  ExpectRefused(ReadTlsFiles(File("ca.crt"), File("client.crt"), File("server.key"), kEtcdNames),
                {"--etcd-key", File("server.key"), "is not the private key", "--etcd-cert", File("client.crt")});
}

TEST_F(TlsFilesTest, FilesWithoutPemAreRefused) {
  ExpectRefused(ReadTlsFiles(File("not-pem.txt"), "", "", kEtcdNames),
                {"--etcd-cacert", File("not-pem.txt"), "no PEM certificate"});
  ExpectRefused(ReadTlsFiles("", File("client.key"), File("client.key"), kEtcdNames),
                {"--etcd-cert", File("client.key"), "no PEM certificate"});
  ExpectRefused(ReadTlsFiles("", File("client.crt"), File("client.crt"), kEtcdNames),
                {"--etcd-key", File("client.crt"), "no unencrypted PEM private key"});
}

TEST_F(TlsFilesTest, TheDefaultNamesAreHerdsOwnTlsFlags) {
  ExpectRefused(ReadTlsFiles("", File("client.crt"), ""), {"--tls-cert needs --tls-key"});
}

}  // namespace
}  // namespace herd
