#include "coordinator/auth_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/sha256.h"
#include "coordinator/authenticator.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Hash(const std::string& token) { return "sha256:" + Sha256Hex(token); }

TEST(AuthFile, ParsesRolesCredentialsAndWorkerIds) {
  auto table = ParseAuthFile("# who\n"
                             "alice  user   " + Hash("a") + "  # trailing comment\n"
                             "\n"
                             "pool   worker " + Hash("w") + " w0,gpu-*\n"
                             "node-7 worker cert:node-7.example node-7\n"
                             "ops    admin  " + Hash("o") + "\n",
                             "auth");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->credentials.size(), 4);
  EXPECT_EQ(table->credentials[0].principal.name, "alice");
  EXPECT_EQ(table->credentials[0].principal.role, Role::kUser);
  EXPECT_EQ(table->credentials[0].token_sha256, Sha256Hex("a"));
  EXPECT_THAT(table->credentials[1].principal.worker_ids, ElementsAre("w0", "gpu-*"));
  EXPECT_EQ(table->credentials[2].cert_identity, "node-7.example");
  EXPECT_EQ(table->credentials[3].principal.role, Role::kAdmin);
}

TEST(AuthFile, ErrorsNameTheLineAndTheProblem) {
  auto error = [](const std::string& text) { return std::string(ParseAuthFile(text, "F").status().message()); };
  EXPECT_THAT(error("alice boss " + Hash("a") + "\n"), HasSubstr("F:1: unknown role 'boss'"));
  EXPECT_THAT(error("\nalice user sha256:abc\n"), HasSubstr("F:2: sha256: must be followed by 64"));
  EXPECT_THAT(error("alice user " + Hash("a").substr(0, 20) + "XYZ\n"), HasSubstr("64 lower-case hex"));
  EXPECT_THAT(error("alice user token123\n"), HasSubstr("sha256:HEX or cert:IDENTITY"));
  EXPECT_THAT(error("pool worker " + Hash("w") + "\n"), HasSubstr("needs the worker ids"));
  EXPECT_THAT(error("alice user " + Hash("a") + " w0\n"), HasSubstr("only worker credentials list worker ids"));
  EXPECT_THAT(error("pool worker " + Hash("w") + " w/0\n"), HasSubstr("worker ids: 'w/0'"));
  EXPECT_THAT(error("al!ce user " + Hash("a") + "\n"), HasSubstr("principal 'al!ce'"));
  EXPECT_THAT(error("a user " + Hash("x") + "\nb admin " + Hash("x") + "\n"),
              HasSubstr("F:2: this credential appears on an earlier line"));
  EXPECT_THAT(error("a user " + Hash("x") + "\na admin " + Hash("y") + "\n"),
              HasSubstr("F:2: principal 'a' appears earlier with another role"));
  EXPECT_THAT(error("# nobody\n"), HasSubstr("no credentials"));
}

TEST(AuthFile, APrincipalMayHoldTwoTokensDuringRotation) {
  auto table = ParseAuthFile("alice user " + Hash("old") + "\nalice user " + Hash("new") + "\n", "F");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_NE(FindByToken(*table, "old"), nullptr);
  ASSERT_NE(FindByToken(*table, "new"), nullptr);
  EXPECT_EQ(FindByToken(*table, "new")->name, "alice");
  EXPECT_EQ(FindByToken(*table, "other"), nullptr);
  EXPECT_EQ(FindByToken(*table, ""), nullptr);
}

TEST(Principal, WorkersSpeakOnlyForTheirIdsAdminsForAny) {
  Principal pool{"pool", Role::kWorker, {"w0", "gpu-*"}};
  EXPECT_TRUE(pool.SpeaksFor("w0"));
  EXPECT_TRUE(pool.SpeaksFor("gpu-3"));
  EXPECT_TRUE(pool.SpeaksFor("gpu-"));
  EXPECT_FALSE(pool.SpeaksFor("w01"));
  EXPECT_FALSE(pool.SpeaksFor("w"));
  EXPECT_FALSE(pool.SpeaksFor("gpu"));
  EXPECT_FALSE(pool.SpeaksFor("cpu-1"));
  EXPECT_FALSE((Principal{"alice", Role::kUser, {}}).SpeaksFor("w0"));
  EXPECT_TRUE((Principal{"ops", Role::kAdmin, {}}).SpeaksFor("anything"));
}

}  // namespace
}  // namespace herd::coordinator
