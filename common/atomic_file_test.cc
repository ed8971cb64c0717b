#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace herd {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/atomic_file_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(AtomicFile, ReplacesContentsAndLeavesNoTemporary) {
  const std::string dir = Dir("replace");
  const std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "first, longer contents").ok());
  AtomicWriteOptions durable;
  durable.durable = true;
  ASSERT_TRUE(WriteFileAtomically(path, std::string("sec\0nd", 6), durable).ok());
  EXPECT_EQ(Read(path), std::string("sec\0nd", 6));
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) entries += entry.exists();
  EXPECT_EQ(entries, 1);
}

TEST(AtomicFile, FailureNamesThePathAndKeepsTheOldContents) {
  const std::string dir = Dir("readonly");
  const std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  auto missing = WriteFileAtomically(dir + "/no/such/folder/f", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find(dir + "/no/such/folder/f"), std::string::npos) << missing;
  EXPECT_NE(missing.message().find("No such file"), std::string::npos) << missing;
  // A folder where the file should go: the rename fails, nothing is left over.
  std::filesystem::create_directories(dir + "/d");
  std::ofstream(dir + "/d/x") << "keep";
  auto over_folder = WriteFileAtomically(dir + "/d", "x");
  EXPECT_FALSE(over_folder.ok());
  EXPECT_EQ(Read(path), "old");
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) entries += entry.exists();
  EXPECT_EQ(entries, 2);  // f and d
}

}  // namespace
}  // namespace herd
