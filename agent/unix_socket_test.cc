#include "agent/unix_socket.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace ncclwatch::agent {
namespace {

using ::ncclwatch::testutil::IsOk;

// Creates a socket file at `path` the way a server does (bind), then closes it: the file stays,
// as after an agent that was killed.
void MakeSocketFile(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0) << strerror(errno);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  close(fd);
}

struct stat Lstat(const std::string& path) {
  struct stat st = {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << strerror(errno);
  return st;
}

// A group other than this process's own that it may give files to (root: any), if there is one.
std::optional<gid_t> OtherGroup() {
  std::vector<gid_t> groups(static_cast<size_t>(getgroups(0, nullptr)));
  if (!groups.empty())
    groups.resize(static_cast<size_t>(getgroups(static_cast<int>(groups.size()), groups.data())));
  for (gid_t g : groups) {
    if (g != getegid()) return g;
  }
  if (geteuid() == 0) return getegid() + 1;  // root may give a file to any gid, named or not
  return std::nullopt;
}

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ncclwatch-sock-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST(ParseFileModeTest, AcceptsOctalUpTo07777AndNamesTheFlagOtherwise) {
  EXPECT_EQ(ParseFileMode("socket-mode", "0660").value(), 0660u);
  EXPECT_EQ(ParseFileMode("socket-mode", "660").value(), 0660u);
  EXPECT_EQ(ParseFileMode("socket-mode", "07777").value(), 07777u);
  EXPECT_EQ(ParseFileMode("socket-mode", "0").value(), 0u);
  for (const char* bad : {"", "rw-rw----", "0668", "010000", "-1", "0660x"}) {
    absl::StatusOr<mode_t> mode = ParseFileMode("socket-dir-mode", bad);
    ASSERT_FALSE(mode.ok()) << bad;
    EXPECT_EQ(mode.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(mode.status().message(),
              "--socket-dir-mode=" + std::string(bad) + " is not an octal file mode such as 0660");
  }
}

TEST(UnixSocketPathTest, StripsTheScheme) {
  EXPECT_EQ(UnixSocketPath("unix:///run/ncclwatch/agent.sock"), "/run/ncclwatch/agent.sock");
  EXPECT_EQ(UnixSocketPath("unix:agent.sock"), "agent.sock");
  EXPECT_EQ(UnixSocketPath("unix:/run/agent.sock"), "/run/agent.sock");
}

TEST_F(UnixSocketTest, CreatesAMissingDirectoryWithTheConfiguredMode) {
  const std::string parent = dir_ + "/a/b";
  ASSERT_THAT(PrepareUnixSocket(parent + "/agent.sock", 0710), IsOk());
  EXPECT_TRUE(S_ISDIR(Lstat(parent).st_mode));
  EXPECT_EQ(Lstat(parent).st_mode & 07777, 0710u);  // not what the umask left
  EXPECT_TRUE(S_ISDIR(Lstat(dir_ + "/a").st_mode));
  EXPECT_FALSE(std::filesystem::exists(parent + "/agent.sock"));
}

TEST_F(UnixSocketTest, LeavesAnExistingDirectoryAsItIs) {
  ASSERT_EQ(chmod(dir_.c_str(), 0701), 0);
  ASSERT_THAT(PrepareUnixSocket(dir_ + "/agent.sock", 0755), IsOk());
  EXPECT_EQ(Lstat(dir_).st_mode & 07777, 0701u);
}

TEST_F(UnixSocketTest, ReplacesAStaleSocket) {
  const std::string path = dir_ + "/agent.sock";
  MakeSocketFile(path);
  ASSERT_TRUE(S_ISSOCK(Lstat(path).st_mode));
  ASSERT_THAT(PrepareUnixSocket(path, 0755), IsOk());
  EXPECT_FALSE(std::filesystem::exists(path));
  MakeSocketFile(path);  // the path can be bound again
}

TEST_F(UnixSocketTest, RefusesAFileThatIsNotASocketAndLeavesItAlone) {
  const std::string file = dir_ + "/agent.sock";
  std::ofstream(file) << "keep me";
  const std::string directory = dir_ + "/a-directory";
  std::filesystem::create_directory(directory);
  const std::string socket = dir_ + "/real.sock";
  MakeSocketFile(socket);
  const std::string link = dir_ + "/link.sock";
  std::filesystem::create_symlink(socket, link);
  for (const std::string& path : {file, directory, link}) {
    absl::Status s = PrepareUnixSocket(path, 0755);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << path;
    EXPECT_EQ(s.message(), path + " exists and is not a socket; refusing to replace it");
  }
  std::string content;
  std::getline(std::ifstream(file), content);
  EXPECT_EQ(content, "keep me");
  EXPECT_TRUE(S_ISDIR(Lstat(directory).st_mode));
  EXPECT_TRUE(S_ISLNK(Lstat(link).st_mode));
  EXPECT_TRUE(S_ISSOCK(Lstat(socket).st_mode));
}

TEST_F(UnixSocketTest, ADirectoryThatCannotBeCreatedIsUnavailable) {
  std::ofstream(dir_ + "/file") << "x";
  absl::Status s = PrepareUnixSocket(dir_ + "/file/sub/agent.sock", 0755);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(s.message(), "cannot create socket directory " + dir_ + "/file/sub"))
      << s;
}

TEST_F(UnixSocketTest, ADirectoryThatCannotBeLookedAtIsAnErrorNotACrash) {
  // A symbolic link to itself: looking at the directory fails with ELOOP.
  ASSERT_EQ(symlink((dir_ + "/loop").c_str(), (dir_ + "/loop").c_str()), 0);
  absl::Status s = PrepareUnixSocket(dir_ + "/loop/agent.sock", 0755);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(s.message(), "cannot inspect socket directory " + dir_ + "/loop"))
      << s;
}

TEST_F(UnixSocketTest, SecureGivesTheSocketItsModeAndGroup) {
  const std::string path = dir_ + "/agent.sock";
  MakeSocketFile(path);
  ASSERT_THAT(SecureUnixSocket(path, 0660, ""), IsOk());
  EXPECT_EQ(Lstat(path).st_mode & 07777, 0660u);
  EXPECT_EQ(Lstat(path).st_gid, getegid());  // no group: unchanged

  const std::optional<gid_t> other = OtherGroup();
  if (!other) GTEST_SKIP() << "no second group to give the socket to";
  ASSERT_THAT(SecureUnixSocket(path, 0600, std::to_string(*other)), IsOk());
  EXPECT_EQ(Lstat(path).st_gid, *other);
  EXPECT_EQ(Lstat(path).st_mode & 07777, 0600u);
  // By name, back to this process's own group.
  const struct group* own = getgrgid(getegid());
  if (own == nullptr) GTEST_SKIP() << "this process's group has no name";
  ASSERT_THAT(SecureUnixSocket(path, 0666, own->gr_name), IsOk());
  EXPECT_EQ(Lstat(path).st_gid, getegid());
  EXPECT_EQ(Lstat(path).st_mode & 07777, 0666u);
}

TEST_F(UnixSocketTest, SecureRefusesAnUnknownGroupBeforeChangingAnything) {
  const std::string path = dir_ + "/agent.sock";
  MakeSocketFile(path);
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  absl::Status s = SecureUnixSocket(path, 0660, "ncclwatch-no-such-group");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--socket-group=ncclwatch-no-such-group: no such group");
  EXPECT_EQ(Lstat(path).st_mode & 07777, 0644u);
}

TEST_F(UnixSocketTest, SecureReportsAMissingSocket) {
  absl::Status s = SecureUnixSocket(dir_ + "/absent.sock", 0660, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(s.message(), "cannot chmod " + dir_ + "/absent.sock: ")) << s;
}

}  // namespace
}  // namespace ncclwatch::agent
