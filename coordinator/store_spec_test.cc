#include "coordinator/store_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(StoreSpec, Sqlite) {
  auto spec = ParseStoreSpec("sqlite:/var/lib/herd/coordinator.db");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, StoreSpec::Kind::kSqlite);
  EXPECT_EQ(spec->sqlite_path, "/var/lib/herd/coordinator.db");
}

TEST(StoreSpec, EtcdEndpoints) {
  auto spec = ParseStoreSpec("etcd://h1:2379,10.0.0.2:2379,[::1]:2379");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, StoreSpec::Kind::kEtcd);
  EXPECT_THAT(spec->etcd_endpoints, ElementsAre("h1:2379", "10.0.0.2:2379", "[::1]:2379"));
}

TEST(StoreSpec, BadValuesNameWhatIsWrong) {
  EXPECT_THAT(ParseStoreSpec("sqlite:").status().message(), HasSubstr("needs a database path"));
  EXPECT_THAT(ParseStoreSpec("etcd://h1:2379,h2").status().message(), HasSubstr("\"h2\" is not HOST:PORT"));
  EXPECT_THAT(ParseStoreSpec("etcd://").status().message(), HasSubstr("\"\" is not HOST:PORT"));
  EXPECT_THAT(ParseStoreSpec("etcd://h1:99999").status().message(), HasSubstr("h1:99999"));
  EXPECT_THAT(ParseStoreSpec("/var/lib/herd").status().message(), HasSubstr("expected sqlite:PATH or etcd://"));
}

TEST(StoreSpec, EtcdPrefixIsSlashed) {
  EXPECT_EQ(*NormalizeEtcdPrefix("/herd/"), "/herd/");
  EXPECT_EQ(*NormalizeEtcdPrefix("herd/prod"), "/herd/prod/");
  EXPECT_FALSE(NormalizeEtcdPrefix("/").ok());
  EXPECT_FALSE(NormalizeEtcdPrefix("").ok());
}

}  // namespace
}  // namespace herd::coordinator
