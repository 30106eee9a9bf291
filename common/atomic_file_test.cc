#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace aggswitch::common {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/aggswitch-atomic-file-test." + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(AtomicFileTest, ReplacesTheContentWithTheModeAsked) {
  const std::string path = dir_ + "/state.json";
  ASSERT_TRUE(WriteFileAtomically(path, "first", 0600).ok());
  EXPECT_EQ(Read(path), "first");
  ASSERT_TRUE(WriteFileAtomically(path, std::string(1 << 20, 'x'), 0600).ok());
  EXPECT_EQ(Read(path).size(), 1u << 20);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << "no temporary file is left behind";
}

TEST_F(AtomicFileTest, AFailureLeavesTheOldContent) {
  const std::string path = dir_ + "/state.json";
  ASSERT_TRUE(WriteFileAtomically(path, "kept").ok());
  // The temporary file cannot be made: a directory stands in its place.
  std::filesystem::create_directories(path + ".tmp");
  const Status s = WriteFileAtomically(path, "lost");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ".tmp"), std::string::npos) << s.message();
  EXPECT_EQ(Read(path), "kept");
  EXPECT_FALSE(WriteFileAtomically(dir_ + "/no/such/dir/x", "y").ok());
}

}  // namespace
}  // namespace aggswitch::common
