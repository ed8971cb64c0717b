#include "coordinator/sql_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <limits>

namespace herd::coordinator::sql {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Thing {
  std::string id;
  int64_t count = 0;
  double weight = 0;
  std::string payload;  // bytes, zeros included
  bool flagged = false;
};

using ThingColumn = Column<Thing>;

Table<Thing> Things(std::vector<std::string> retired = {}) {
  return Table<Thing>(
      "things",
      {
          ThingColumn::Text(
              "id", "PRIMARY KEY", [](const Thing& t) { return t.id; },
              [](Thing& t, const std::string& v) { t.id = v; }),
          ThingColumn::Integer(
              "count", "NOT NULL", [](const Thing& t) { return t.count; }, [](Thing& t, int64_t v) { t.count = v; }),
          ThingColumn::Real(
              "weight", "NOT NULL", [](const Thing& t) { return t.weight; }, [](Thing& t, double v) { t.weight = v; }),
          ThingColumn::Blob(
              "payload", "NOT NULL DEFAULT x''", [](const Thing& t) { return t.payload; },
              [](Thing& t, const std::string& v) { t.payload = v; }),
          ThingColumn::Integer(
              "flagged", "NOT NULL DEFAULT 1", [](const Thing& t) { return t.flagged; },
              [](Thing& t, int64_t v) -> absl::Status {
                if (v != 0 && v != 1) return absl::DataLossError(absl::StrCat("not 0 or 1: ", v));
                t.flagged = v != 0;
                return absl::OkStatus();
              }),
      },
      std::move(retired));
}

// A later version of a table without `flagged`: rows counted before it
// existed are the flagged ones.
Table<Thing> FlaggedWhenCounted() {
  return Table<Thing>("things", {
      ThingColumn::Text(
          "id", "PRIMARY KEY", [](const Thing& t) { return t.id; },
          [](Thing& t, const std::string& v) { t.id = v; }),
      ThingColumn::Integer(
          "count", "NOT NULL", [](const Thing& t) { return t.count; }, [](Thing& t, int64_t v) { t.count = v; }),
      ThingColumn::Integer(
          "flagged", "NOT NULL DEFAULT 0", [](const Thing& t) { return t.flagged; },
          [](Thing& t, int64_t v) { t.flagged = v != 0; })
          .WithBackfill("UPDATE things SET flagged = 1 WHERE count > 0"),
  });
}

class SqlTableTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(sqlite3_open(":memory:", &db_), SQLITE_OK); }
  void TearDown() override { sqlite3_close(db_); }

  std::vector<Thing> ReadAll(const Table<Thing>& table) {
    std::vector<Thing> things;
    absl::Status status = table.ReadAll(db_, " ORDER BY id", [&](Thing thing) {
      things.push_back(std::move(thing));
      return absl::OkStatus();
    });
    EXPECT_TRUE(status.ok()) << status;
    return things;
  }

  std::vector<std::string> Columns() {
    std::vector<std::string> names;
    EXPECT_TRUE(ColumnsInDatabase(db_, "things", &names).ok());
    return names;
  }

  sqlite3* db_ = nullptr;
};

TEST_F(SqlTableTest, DerivesTheStatementsFromTheDescription) {
  const Table<Thing> table = Things();
  EXPECT_EQ(CreateTableSql(table.name(), table.schema()),
            "CREATE TABLE IF NOT EXISTS things (id TEXT PRIMARY KEY, count INTEGER NOT NULL, weight REAL NOT NULL, "
            "payload BLOB NOT NULL DEFAULT x'', flagged INTEGER NOT NULL DEFAULT 1)");
  EXPECT_EQ(InsertSql(table.name(), table.schema(), /*replace=*/true),
            "INSERT OR REPLACE INTO things (id, count, weight, payload, flagged) VALUES (?, ?, ?, ?, ?)");
  EXPECT_EQ(SelectSql(table.name(), table.schema(), " ORDER BY id"),
            "SELECT id, count, weight, payload, flagged FROM things ORDER BY id");
}

TEST_F(SqlTableTest, RecordsRoundTripWithEveryType) {
  const Table<Thing> table = Things();
  ASSERT_TRUE(table.Migrate(db_).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ASSERT_TRUE(table.Write(db_, {"a", -7, 0.25, std::string("\0x\0", 3), true}).ok());
  ASSERT_TRUE(table.Write(db_, {"b", int64_t{1} << 40, nan, "", false}).ok());
  ASSERT_TRUE(table.Write(db_, {"c", 0, -std::numeric_limits<double>::infinity(), "z", false}).ok());

  std::vector<Thing> back = ReadAll(table);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].count, -7);
  EXPECT_EQ(back[0].weight, 0.25);
  EXPECT_EQ(back[0].payload, std::string("\0x\0", 3));
  EXPECT_TRUE(back[0].flagged);
  EXPECT_EQ(back[1].count, int64_t{1} << 40);
  EXPECT_TRUE(std::isnan(back[1].weight));
  EXPECT_FALSE(back[1].flagged);
  EXPECT_EQ(back[2].weight, -std::numeric_limits<double>::infinity());
}

TEST_F(SqlTableTest, WriteReplacesTheRowWithTheSameKeyAndAddRefusesIt) {
  const Table<Thing> table = Things();
  ASSERT_TRUE(table.Migrate(db_).ok());
  ASSERT_TRUE(table.Write(db_, {"a", 1, 1, "", false}).ok());
  ASSERT_TRUE(table.Write(db_, {"a", 2, 2, "", true}).ok());
  std::vector<Thing> back = ReadAll(table);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].count, 2);

  absl::Status duplicate = table.Add(db_, {"a", 3, 3, "", false});
  EXPECT_THAT(std::string(duplicate.message()), HasSubstr("UNIQUE constraint failed: things.id"));
  EXPECT_TRUE(table.Add(db_, {"b", 3, 3, "", false}).ok());
  EXPECT_EQ(ReadAll(table).size(), 2u);
}

// Values are read by column name: a table whose columns lie in another
// order (as one created by hand, or migrated in another order) reads right.
TEST_F(SqlTableTest, ReadsByNameWhateverTheOrderInTheDatabase) {
  ASSERT_TRUE(Exec(db_,
                   "CREATE TABLE things (flagged INTEGER NOT NULL, payload BLOB NOT NULL, weight REAL NOT NULL, "
                   "count INTEGER NOT NULL, id TEXT PRIMARY KEY);"
                   "INSERT INTO things VALUES (1, x'00ff', 2.5, 9, 'a');")
                  .ok());
  const Table<Thing> table = Things();
  ASSERT_TRUE(table.Migrate(db_).ok());
  std::vector<Thing> back = ReadAll(table);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].id, "a");
  EXPECT_EQ(back[0].count, 9);
  EXPECT_EQ(back[0].weight, 2.5);
  EXPECT_EQ(back[0].payload, std::string("\0\xff", 2));
  EXPECT_TRUE(back[0].flagged);
}

// An older table gains the described columns it lacks, with their defaults
// for the rows it holds, and loses the retired ones; its rows stay.
TEST_F(SqlTableTest, MigrateAddsMissingColumnsAndDropsRetiredOnes) {
  ASSERT_TRUE(Exec(db_,
                   "CREATE TABLE things (id TEXT PRIMARY KEY, count INTEGER NOT NULL, weight REAL NOT NULL, "
                   "obsolete INTEGER NOT NULL DEFAULT -1, unknown TEXT NOT NULL DEFAULT 'kept');"
                   "INSERT INTO things (id, count, weight, obsolete) VALUES ('a', 4, 0.5, 3), ('b', 5, 1.5, 4);")
                  .ok());
  const Table<Thing> table = Things({"obsolete"});
  ASSERT_TRUE(table.Migrate(db_).ok());
  // Columns nobody retired are left alone: a newer version's data survives.
  EXPECT_THAT(Columns(), ElementsAre("id", "count", "weight", "unknown", "payload", "flagged"));

  std::vector<Thing> back = ReadAll(table);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].id, "a");
  EXPECT_EQ(back[0].count, 4);
  EXPECT_EQ(back[0].payload, "");
  EXPECT_TRUE(back[0].flagged);  // the added column's default
  EXPECT_EQ(back[1].weight, 1.5);

  // Migrating again changes nothing.
  ASSERT_TRUE(table.Migrate(db_).ok());
  EXPECT_THAT(Columns(), ElementsAre("id", "count", "weight", "unknown", "payload", "flagged"));
  ASSERT_TRUE(table.Write(db_, {"c", 6, 2.5, "p", false}).ok());
  EXPECT_EQ(ReadAll(table).size(), 3u);
}

// A backfill sets an added column for the rows its default does not
// describe, once: rows written after it keep what they were written with.
TEST_F(SqlTableTest, AnAddedColumnsBackfillRunsOnceWhenItIsAdded) {
  ASSERT_TRUE(Exec(db_,
                   "CREATE TABLE things (id TEXT PRIMARY KEY, count INTEGER NOT NULL);"
                   "INSERT INTO things (id, count) VALUES ('a', 0), ('b', 5);")
                  .ok());
  const Table<Thing> table = FlaggedWhenCounted();
  ASSERT_TRUE(table.Migrate(db_).ok());
  std::vector<Thing> back = ReadAll(table);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_FALSE(back[0].flagged);
  EXPECT_TRUE(back[1].flagged);

  ASSERT_TRUE(table.Write(db_, {"c", 7, 0, "", false}).ok());
  ASSERT_TRUE(FlaggedWhenCounted().Migrate(db_).ok());  // the column is there: no backfill
  back = ReadAll(table);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_FALSE(back[2].flagged);
}

TEST_F(SqlTableTest, AColumnThatCannotBeAddedIsNamed) {
  ASSERT_TRUE(Exec(db_,
                   "CREATE TABLE things (id TEXT PRIMARY KEY, weight REAL NOT NULL, payload BLOB, flagged INT);"
                   "INSERT INTO things VALUES ('a', 1, x'', 1);")
                  .ok());
  // count is NOT NULL without a default: no value for the row there.
  absl::Status status = Things().Migrate(db_);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("adding column things.count"));
}

TEST_F(SqlTableTest, AValueTheRecordRefusesNamesItsColumn) {
  const Table<Thing> table = Things();
  ASSERT_TRUE(table.Migrate(db_).ok());
  ASSERT_TRUE(Exec(db_, "INSERT INTO things VALUES ('a', 1, 1, x'', 7)").ok());
  absl::Status status = table.ReadAll(db_, "", [](Thing) { return absl::OkStatus(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "things.flagged: not 0 or 1: 7");
}

TEST_F(SqlTableTest, AnUnknownResultColumnIsAnError) {
  Statement select(db_, "SELECT 1 AS one");
  ASSERT_TRUE(select.Next());
  EXPECT_EQ(std::get<int64_t>(select.Get("one", Type::kInteger)), 1);
  select.Get("two", Type::kInteger);
  EXPECT_THAT(std::string(select.status().message()), HasSubstr("no column two"));
}

}  // namespace
}  // namespace herd::coordinator::sql
