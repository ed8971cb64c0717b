#include "coordinator/etcd/etcd_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

namespace herd::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

TEST(EtcdCredentialsTest, NeitherFlagMeansNoAuthentication) {
  auto credentials = ReadEtcdCredentials("", "");
  ASSERT_TRUE(credentials.ok());
  EXPECT_FALSE(credentials->enabled());
}

TEST(EtcdCredentialsTest, OneTrailingLineBreakIsNotThePassword) {
  auto credentials = ReadEtcdCredentials("herd", Write("crlf", " pass word \r\n"));
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_EQ(credentials->user, "herd");
  EXPECT_EQ(credentials->password, " pass word ");
  EXPECT_EQ(ReadEtcdCredentials("herd", Write("bare", "p\n\n"))->password, "p\n");
}

TEST(EtcdCredentialsTest, ErrorsNameTheFlagAndTheFile) {
  EXPECT_THAT(ReadEtcdCredentials("herd", "").status().message(),
              AllOf(HasSubstr("--etcd-user herd"), HasSubstr("needs --etcd-password-file")));
  const std::string file = Write("orphan", "p");
  EXPECT_THAT(ReadEtcdCredentials("", file).status().message(),
              AllOf(HasSubstr("--etcd-password-file " + file), HasSubstr("needs --etcd-user")));
  const std::string absent = ::testing::TempDir() + "/absent";
  EXPECT_THAT(ReadEtcdCredentials("herd", absent).status().message(),
              HasSubstr("--etcd-password-file " + absent));
  const std::string empty = Write("empty", "\n");
  EXPECT_THAT(ReadEtcdCredentials("herd", empty).status().message(),
              AllOf(HasSubstr("--etcd-password-file " + empty), HasSubstr("password for etcd user herd is empty")));
  const std::string open = Write("open", "p", 0644);
  EXPECT_THAT(ReadEtcdCredentials("herd", open).status().message(),
              AllOf(HasSubstr("--etcd-password-file " + open), HasSubstr("too open")));
}

}  // namespace
}  // namespace herd::coordinator
