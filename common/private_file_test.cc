#include "common/private_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/auth.h"
#include "common/private_dir.h"

namespace herd {
namespace {

using ::testing::HasSubstr;

std::string FileWithMode(const std::string& name, mode_t mode) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << "secret-token\n";
  chmod(path.c_str(), mode);
  return path;
}

TEST(PrivateFile, OwnerOnlyFilesAreRead) {
  auto token = ReadTokenFile(FileWithMode("private", 0600));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "secret-token");
  EXPECT_TRUE(CheckPrivateFile(FileWithMode("readonly", 0400), "token file").ok());
}

TEST(PrivateFile, FilesOthersOrTheGroupMayReadAreRefusedLikeSsh) {
  for (mode_t mode : {0644, 0640, 0604, 0660, 0602}) {
    const std::string path = FileWithMode("open-" + std::to_string(mode), mode);
    auto token = ReadTokenFile(path);
    EXPECT_EQ(token.status().code(), absl::StatusCode::kPermissionDenied) << mode;
    EXPECT_THAT(token.status().message(), HasSubstr("are too open")) << mode;
    EXPECT_THAT(token.status().message(), HasSubstr("chmod 600 " + path)) << mode;
  }
}

TEST(PrivateFile, MissingFileIsNotFoundAndAFolderIsRefused) {
  EXPECT_EQ(ReadTokenFile(::testing::TempDir() + "/no-such-token").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckPrivateFile(::testing::TempDir(), "token file").code(), absl::StatusCode::kInvalidArgument);
}

TEST(PrivateDir, CreatedOwnerOnlyWhateverTheUmask) {
  const std::string path = ::testing::TempDir() + "/state/inner";
  std::filesystem::remove_all(::testing::TempDir() + "/state");
  const mode_t old_umask = umask(0);
  absl::Status status = CreatePrivateDir(path);
  umask(old_umask);
  ASSERT_TRUE(status.ok()) << status;
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700);
  EXPECT_TRUE(CreatePrivateDir(path).ok());  // exists: fine
}

}  // namespace
}  // namespace herd
