// placement.require and sync.islands_by: parsed from YAML, checked with
// errors that name the field.
#include <gtest/gtest.h>

#include <string>

#include "common/job_spec.h"
#include "common/job_spec_yaml.h"

namespace herd {
namespace {

constexpr char kBase[] = R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 64, synthetic_features: 4, synthetic_classes: 2}
batch_size: 8
epochs: 1
optimizer: {lr: 0.1}
min_workers: 2
)";

absl::StatusOr<v1::JobSpec> Parsed(const std::string& extra) {
  auto spec = ParseJobSpecYaml(std::string(kBase) + extra);
  if (!spec.ok()) return spec.status();
  ApplyJobDefaults(&*spec);
  return spec;
}

std::string Invalid(const std::string& extra) {
  auto spec = Parsed(extra);
  if (!spec.ok()) return std::string(spec.status().message());
  absl::Status status = ValidateJobSpec(*spec);
  EXPECT_FALSE(status.ok()) << extra;
  return std::string(status.message());
}

TEST(JobSpecPlacement, ParsesRequireAndIslandsBy) {
  auto spec = Parsed("placement: {require: {pool: a100, site: us-east}}\nsync: {mode: average, islands_by: site}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->placement().require().size(), 2u);
  EXPECT_EQ(spec->placement().require().at("pool"), "a100");
  EXPECT_EQ(spec->placement().require().at("site"), "us-east");
  EXPECT_EQ(spec->sync().islands_by(), "site");
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST(JobSpecPlacement, NoneByDefault) {
  auto spec = Parsed("");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->placement().require().empty());
  EXPECT_EQ(spec->sync().islands_by(), "");
  EXPECT_TRUE(ValidateJobSpec(*spec).ok());
}

TEST(JobSpecPlacement, BadShapesAreNamed) {
  EXPECT_EQ(Invalid("placement: a100\n"), "placement: expected a mapping");
  EXPECT_EQ(Invalid("placement: {pool: a100}\n").rfind("placement.pool: unknown field (known: require)", 0), 0u);
  EXPECT_EQ(Invalid("placement: {require: [a100]}\n"), "placement.require: expected a mapping");
  EXPECT_EQ(Invalid("placement: {require: {pool: [a, b]}}\n"), "placement.require.pool: expected a string");
}

TEST(JobSpecPlacement, LabelSyntaxIsChecked) {
  EXPECT_EQ(Invalid("placement: {require: {pool: 'a 100'}}\n"),
            "placement.require: value 'a 100' of label 'pool' may only contain letters, digits, '-', '_' and '.'");
  EXPECT_EQ(Invalid("placement: {require: {'-pool': a100}}\n"),
            "placement.require: label key '-pool' must begin and end with a letter or digit");
  EXPECT_EQ(Invalid("placement: {require: {pool: ''}}\n"),
            "placement.require: value '' of label 'pool' must not be empty");
  EXPECT_EQ(Invalid("sync: {mode: average, islands_by: 'site name'}\n"),
            "sync.islands_by: label key 'site name' may only contain letters, digits, '-', '_' and '.'");
}

TEST(JobSpecPlacement, IslandsByNeedsModeAverage) {
  EXPECT_EQ(Invalid("sync: {islands_by: site}\n"),
            "sync.islands_by: needs sync.mode average (islands average their parameters across sites)");
  EXPECT_EQ(Invalid("sync: {mode: allreduce, islands_by: site}\n"),
            "sync.islands_by: needs sync.mode average (islands average their parameters across sites)");
}

TEST(JobSpecPlacement, IslandsTakeOverlapStepsAuto) {
  auto spec = Parsed("sync: {mode: average, islands_by: site, overlap_steps: auto, compression: int8}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_TRUE(spec->sync().overlap_steps_auto());
}

TEST(JobSpecPlacement, IslandsByRefusesWhatCrossGroupsCannotAgreeOn) {
  EXPECT_EQ(Invalid("sync: {mode: average, islands_by: site, shares: throughput}\n"),
            "sync.islands_by: does not support sync.shares throughput yet");
}

TEST(JobSpecPlacement, MinWorkersPerIslandIsOneByDefaultWithIslands) {
  auto spec = Parsed("sync: {mode: average, islands_by: site}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sync().min_workers_per_island(), 1);
  auto flat = Parsed("sync: {mode: average}\n");
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->sync().min_workers_per_island(), 0);

  auto two = Parsed("max_workers: 4\nsync: {mode: average, islands_by: site, min_workers_per_island: 2}\n");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->sync().min_workers_per_island(), 2);
  EXPECT_TRUE(ValidateJobSpec(*two).ok()) << ValidateJobSpec(*two);
}

TEST(JobSpecPlacement, MinWorkersPerIslandIsCheckedNamingTheField) {
  EXPECT_EQ(Invalid("sync: {mode: average, min_workers_per_island: 2}\n"),
            "sync.min_workers_per_island: needs sync.islands_by (it is the fewest ranks an island may have)");
  EXPECT_EQ(Invalid("sync: {mode: average, islands_by: site, min_workers_per_island: -1}\n"),
            "sync.min_workers_per_island: must be in [0, 4096], got -1");
  EXPECT_EQ(Invalid("sync: {mode: average, islands_by: site, min_workers_per_island: 3}\n"),
            "sync.min_workers_per_island: must be <= max_workers (2), got 3: no island could ever have that many "
            "ranks");
  EXPECT_EQ(Invalid("sync: {mode: average, islands_by: site, min_workers_per_island: two}\n"),
            "sync.min_workers_per_island: expected an integer, got 'two'");
}

TEST(JobSpecPlacement, GlobalBatchWithIslandsNeedNotDivideByMinWorkers) {
  // The step is split among the islands first: 2 sites of 2 at min_workers 3.
  auto spec = Parsed("min_workers: 3\nmax_workers: 4\nglobal_batch_size: 64\nsync: {mode: average, islands_by: site}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(Invalid("min_workers: 3\nmax_workers: 4\nglobal_batch_size: 64\nsync: {mode: average}\n"),
            "global_batch_size: 64 is not divisible by min_workers (3): the minimum world could not split it evenly");
  EXPECT_EQ(Invalid("global_batch_size: 524296\nsync: {mode: average, islands_by: site}\n"),
            "global_batch_size: 524296 needs 65537 micro-batches of batch_size 8 on a rank alone in its island "
            "(at most 65536)");
}

}  // namespace
}  // namespace herd
