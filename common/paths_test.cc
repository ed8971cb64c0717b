#include "common/paths.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace herd {
namespace {

TEST(Paths, KeepsPathsInsideRoot) {
  namespace fs = std::filesystem;
  fs::path root = fs::path(testing::TempDir()) / "root";
  fs::create_directories(root / "a");
  auto ok = ResolveUnderRoot(root.string(), "a/b.ckpt");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (fs::weakly_canonical(root) / "a/b.ckpt").string());
  EXPECT_TRUE(ResolveUnderRoot(root.string(), "a/../c").ok());

  EXPECT_FALSE(ResolveUnderRoot(root.string(), "../x").ok());
  EXPECT_FALSE(ResolveUnderRoot(root.string(), "a/../../x").ok());
  EXPECT_FALSE(ResolveUnderRoot(root.string(), "/etc/passwd").ok());
  EXPECT_FALSE(ResolveUnderRoot(root.string(), "").ok());
  // A symlink inside the root that points out of it does not escape.
  fs::create_directory_symlink("/tmp", root / "out");
  EXPECT_FALSE(ResolveUnderRoot(root.string(), "out/x").ok());
  // A sibling whose name starts with the root's name is not inside it.
  fs::create_directories(root.string() + "2");
  EXPECT_FALSE(ResolveUnderRoot(root.string(), "../root2/x").ok());
}

}  // namespace
}  // namespace herd
