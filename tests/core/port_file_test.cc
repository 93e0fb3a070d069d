#include "core/port_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace moe {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(t ? t : "/tmp") + "/port_file_test." +
                    std::to_string(getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(PortFileTest, EmptyPathWritesNothing) {
  EXPECT_TRUE(WritePortFile("", 1234).ok());
}

TEST(PortFileTest, WritesThePortAndNoTemporary) {
  const std::string path = TempDir() + "/port";
  ASSERT_TRUE(WritePortFile(path, 50051).ok());
  std::ifstream f(path);
  int port = 0;
  f >> port;
  EXPECT_EQ(port, 50051);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(PortFileTest, MissingDirectoryIsAnErrorNamingThePath) {
  const std::string path = TempDir() + "/no/such/dir/port";
  absl::Status s = WritePortFile(path, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

TEST(PortFileTest, RenameOntoADirectoryFailsAndCleansUp) {
  const std::string path = TempDir() + "/is_a_dir";
  std::filesystem::create_directories(path + "/child");
  absl::Status s = WritePortFile(path, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rename"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace moe
