#include "common/labels.h"

#include <gtest/gtest.h>

#include <string>

namespace herd {
namespace {

TEST(ParseLabelFlags, ReadsKeyValuePairs) {
  absl::StatusOr<Labels> labels = ParseLabelFlags({"site=us-east", "pool=a100", "zone=eu-west-1a"});
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(*labels, (Labels{{"site", "us-east"}, {"pool", "a100"}, {"zone", "eu-west-1a"}}));
  EXPECT_EQ(FormatLabels(*labels), "pool=a100,site=us-east,zone=eu-west-1a");
}

TEST(ParseLabelFlags, NoFlagsNoLabels) {
  absl::StatusOr<Labels> labels = ParseLabelFlags({});
  ASSERT_TRUE(labels.ok());
  EXPECT_TRUE(labels->empty());
  EXPECT_EQ(FormatLabels(*labels), "");
}

// Each bad flag fails naming the flag's text and what is wrong with it.
TEST(ParseLabelFlags, RefusesBadFlagsNamingThem) {
  struct Case {
    std::string flag;
    std::string message;
  };
  const Case cases[] = {
      {"site", "--label 'site': expected KEY=VALUE"},
      {"=us", "--label '=us': label key '' must not be empty"},
      {"site=", "--label 'site=': value '' of label 'site' must not be empty"},
      {"si te=a", "--label 'si te=a': label key 'si te' may only contain letters, digits, '-', '_' and '.'"},
      {"site=a=b", "--label 'site=a=b': value 'a=b' of label 'site' may only contain"},
      {"-site=a", "--label '-site=a': label key '-site' must begin and end with a letter or digit"},
      {"site=us-", "must begin and end with a letter or digit"},
      {"site=a\x1b[2J", "--label 'site=a\\x1b[2J': value 'a\\x1b[2J'"},
      {"site=a\nb", "may only contain"},
      {std::string(64, 'k') + "=v", "is longer than 63 characters"},
      {"k=" + std::string(64, 'v'), "is longer than 63 characters"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Labels> labels = ParseLabelFlags({c.flag});
    ASSERT_FALSE(labels.ok()) << c.flag;
    EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(labels.status().message().find(c.message), std::string::npos) << labels.status();
  }
}

TEST(ParseLabelFlags, RefusesAKeyGivenTwice) {
  absl::StatusOr<Labels> labels = ParseLabelFlags({"site=a", "site=b"});
  ASSERT_FALSE(labels.ok());
  EXPECT_EQ(labels.status().message(), "--label 'site=b': label 'site' is given twice");
}

TEST(ParseLabelFlags, AcceptsTheLongestAndAtMostTheMostLabels) {
  std::vector<std::string> flags;
  for (size_t i = 0; i < kMaxLabels; ++i) flags.push_back("k" + std::to_string(i) + "=" + std::string(63, 'v'));
  EXPECT_TRUE(ParseLabelFlags(flags).ok());
  flags.push_back("one=more");
  absl::StatusOr<Labels> labels = ParseLabelFlags(flags);
  ASSERT_FALSE(labels.ok());
  EXPECT_EQ(labels.status().message(), "--label: 33 labels, at most 32 allowed");
}

TEST(ParseLabelFlags, RefusesKeysThatExportAsOneMetricLabel) {
  EXPECT_EQ(MetricLabelName("topology.zone-name"), "label_topology_zone_name");
  absl::StatusOr<Labels> labels = ParseLabelFlags({"a-b=1", "a.b=2"});
  ASSERT_FALSE(labels.ok());
  EXPECT_EQ(labels.status().message(), "--label: label keys 'a-b' and 'a.b' would both be exported as metric label label_a_b");
}

TEST(ValidateLabels, NamesTheField) {
  EXPECT_TRUE(ValidateLabels("labels", {{"site", "us-east"}}).ok());
  absl::Status status = ValidateLabels("placement.require", {{"pool", "a 100"}});
  EXPECT_EQ(status.message(),
            "placement.require: value 'a 100' of label 'pool' may only contain letters, digits, '-', '_' and '.'");
  Labels many;
  for (size_t i = 0; i <= kMaxLabels; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_EQ(ValidateLabels("labels", many).message(), "labels: 33 labels, at most 32 allowed");
}

}  // namespace
}  // namespace herd
