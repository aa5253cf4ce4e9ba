// The plugin's lifecycle in a real process, with the built .so loaded as NCCL loads it and a
// stand-in agent (plugin_fake_agent) in its own process: fork while a finalize is stalled, fork in
// steady state, exit without finalize while threads launch, an unreachable agent, and a host
// whose own libraries define the plugin's gRPC and protobuf names (plugin_trap_host).
//
// The plugin reads its environment once per process, so each test needs a process of its own:
// ctest runs every test case separately (gtest_discover_tests); run by hand, use --gtest_filter.
// No test sleeps to synchronise: each waits for a line from the agent, a log line from the plugin
// or a child's exit, with a deadline that only bounds a failure.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/testing/nccl_driver.h"

// LeakSanitizer's hook (sanitizer builds ask it before their exit-time leak check). A forked
// child inherits the parent's heap without its threads, so it would call their live memory leaked.
bool g_forked_child = false;
extern "C" int __lsan_is_turned_off() { return g_forked_child ? 1 : 0; }

namespace ncclwatch::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string TempDir() {
  char tmpl[] = "/tmp/ncclwatch-lifecycle-XXXXXX";
  return mkdtemp(tmpl);
}

// The stand-in agent, its stdout on a pipe read line by line.
class FakeAgent {
 public:
  FakeAgent(const std::string& socket, const std::string& mode) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      std::string s = "--socket=" + socket, m = "--mode=" + mode;
      execl(NCCLWATCH_FAKE_AGENT, NCCLWATCH_FAKE_AGENT, s.c_str(), m.c_str(), nullptr);
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~FakeAgent() {
    Kill();
    if (fd_ >= 0) close(fd_);
  }
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // Reads lines until one starts with `prefix` (true) or `timeout` passes or the agent exits.
  bool WaitFor(const std::string& prefix, std::chrono::milliseconds timeout = kTimeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      size_t nl;
      while ((nl = buffer_.find('\n')) != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        if (line.rfind(prefix, 0) == 0) return true;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) return false;
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }
  static constexpr std::chrono::milliseconds kTimeout{20000};

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffer_;
};

// Waits at most `timeout` for child `pid` to exit (no sleeping: poll on a pidfd). Returns its
// wait status, or -1 when it did not exit in time (it is then killed).
int WaitChild(pid_t pid, std::chrono::milliseconds timeout) {
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return -2;
  pollfd p{pidfd, POLLIN, 0};
  int ready = poll(&p, 1, static_cast<int>(timeout.count()));
  close(pidfd);
  int status = 0;
  if (ready <= 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  waitpid(pid, &status, 0);
  return status;
}

// What the plugin logged through the NCCL logger we gave it.
struct LogLines {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, std::string>> lines;
  int Count(int level, const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (auto& [l, text] : lines) n += l == level && text.find(needle) != std::string::npos;
    return n;
  }
  bool WaitFor(int level, const std::string& needle, int count) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, FakeAgent::kTimeout, [&] {
      int n = 0;
      for (auto& [l, text] : lines) n += l == level && text.find(needle) != std::string::npos;
      return n >= count;
    });
  }
};
LogLines g_log;

void Logger(abi::LogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  {
    std::lock_guard<std::mutex> lock(g_log.mu);
    g_log.lines.emplace_back(level, buf);
  }
  g_log.cv.notify_all();
}

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    socket_ = dir_ + "/agent.sock";
    setenv("NCCLWATCH_AGENT_ADDR", ("unix://" + socket_).c_str(), 1);
    setenv("NCCLWATCH_FLUSH_INTERVAL_MS", "20", 1);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_, socket_;
};

TEST_F(LifecycleTest, ForkWhileFinalizeIsStalledLeavesTheChildFreeToExit) {
  setenv("NCCLWATCH_FINALIZE_TIMEOUT_MS", "60000", 1);
  FakeAgent agent(socket_, "stall-at-close");
  ASSERT_TRUE(agent.WaitFor("listening"));
  NcclDriver nccl(NCCLWATCH_PLUGIN_SO);
  ASSERT_TRUE(nccl.ok()) << nccl.error();
  void* ctx = nccl.Init(0xf0c1, 0, 2, Logger);
  ASSERT_NE(ctx, nullptr);
  for (uint64_t seq = 0; seq < 100; ++seq) nccl.Collective(ctx, seq, 2);
  ASSERT_TRUE(agent.WaitFor("report"));
  // The last communicator's finalize drains to an agent that never ends the stream.
  std::thread finalize([&] { nccl.Finalize(ctx); });
  ASSERT_TRUE(agent.WaitFor("half-closed"));  // the finalize is now waiting, holding its lock

  for (int i = 0; i < 3; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      g_forked_child = true;
      // A data-loader worker: it may even run NCCL calls of its own, which find no plugin.
      void* child_ctx = nccl.Init(0xf0c2, 0, 2, Logger);
      nccl.Collective(child_ctx, 0, 2);
      exit(child_ctx == nullptr ? 0 : 1);
    }
    ASSERT_GT(pid, 0);
    const int status = WaitChild(pid, std::chrono::milliseconds(1000));
    ASSERT_NE(status, -1) << "the forked child's exit(0) did not return within 1 s";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  agent.Kill();  // ends the stalled stream: the parent's finalize returns
  finalize.join();
}

TEST_F(LifecycleTest, ForkInSteadyStateKeepsTheParentReporting) {
  FakeAgent agent(socket_, "read");
  ASSERT_TRUE(agent.WaitFor("listening"));
  NcclDriver nccl(NCCLWATCH_PLUGIN_SO);
  ASSERT_TRUE(nccl.ok()) << nccl.error();
  void* ctx = nccl.Init(0xf0c3, 0, 2, Logger);
  ASSERT_NE(ctx, nullptr);
  for (uint64_t seq = 0; seq < 100; ++seq) nccl.Collective(ctx, seq, 2);
  ASSERT_TRUE(agent.WaitFor("report"));
  pid_t pid = fork();
  if (pid == 0) {
    g_forked_child = true;
    nccl.Collective(ctx, 1000, 2);  // the inherited context: ignored in the child
    exit(0);
  }
  ASSERT_GT(pid, 0);
  const int status = WaitChild(pid, std::chrono::milliseconds(1000));
  ASSERT_NE(status, -1) << "the forked child's exit(0) did not return within 1 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  // The parent's threads and stream are untouched: its reports keep coming.
  for (uint64_t seq = 100; seq < 200; ++seq) nccl.Collective(ctx, seq, 2);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(agent.WaitFor("report")) << i;
  nccl.Finalize(ctx);
  EXPECT_TRUE(agent.WaitFor("half-closed"));
}

TEST_F(LifecycleTest, ExitWithoutFinalizeWhileFourThreadsLaunchExitsCleanlyEveryTime) {
  FakeAgent agent(socket_, "read");
  ASSERT_TRUE(agent.WaitFor("listening"));
  for (int run = 0; run < 20; ++run) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(NCCLWATCH_EXIT_HOST, NCCLWATCH_EXIT_HOST, NCCLWATCH_PLUGIN_SO, nullptr);
      _exit(127);
    }
    ASSERT_GT(pid, 0);
    const int status = WaitChild(pid, std::chrono::milliseconds(30000));
    ASSERT_NE(status, -1) << "run " << run << " did not exit";
    ASSERT_TRUE(WIFEXITED(status))
        << "run " << run << ": killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "run " << run;
  }
  // The exit path handed its final reports over: four communicators per run.
  EXPECT_TRUE(agent.WaitFor("half-closed"));
}

TEST_F(LifecycleTest, AnUnreachableAgentIsOneWarningThenRecoveryIsNoted) {
  const std::string addr = "unix://" + socket_;  // nothing there yet
  NcclDriver nccl(NCCLWATCH_PLUGIN_SO);
  ASSERT_TRUE(nccl.ok()) << nccl.error();
  void* ctx = nccl.Init(0xf0c4, 0, 2, Logger);
  ASSERT_NE(ctx, nullptr);
  for (uint64_t seq = 0; seq < 100; ++seq) nccl.Collective(ctx, seq, 2);
  // Several reconnection attempts fail (each one is a trace line)...
  ASSERT_TRUE(g_log.WaitFor(abi::kLogTrace, "still unreachable", 3));
  // ...and only the first failure was a warning, naming the address and the reason.
  EXPECT_EQ(g_log.Count(abi::kLogWarn, "cannot reach the node agent"), 1);
  EXPECT_EQ(
      g_log.Count(abi::kLogWarn, "at " + addr + ": " + socket_ + ": No such file or directory"), 1);
  EXPECT_EQ(g_log.Count(abi::kLogWarn, ""), 1);  // no other warning either
  FakeAgent agent(socket_, "read");
  ASSERT_TRUE(agent.WaitFor("listening"));
  ASSERT_TRUE(g_log.WaitFor(abi::kLogInfo, "reached the node agent at " + addr + " again", 1));
  EXPECT_TRUE(agent.WaitFor("report"));
  EXPECT_EQ(g_log.Count(abi::kLogWarn, ""), 1);
  nccl.Finalize(ctx);
}

TEST_F(LifecycleTest, ALoaderWithoutItsEngineSaysWhyOnceAndLeavesTheJobAlone) {
  const std::string copy = dir_ + "/libnccl-profiler-ncclwatch.so";  // no engine beside it
  ASSERT_EQ(std::system(("cp " NCCLWATCH_PLUGIN_SO " " + copy).c_str()), 0);
  NcclDriver nccl(copy.c_str());
  ASSERT_TRUE(nccl.ok()) << nccl.error();
  void* a = nccl.Init(0xd15a, 0, 2, Logger);
  void* b = nccl.Init(0xd15b, 1, 2, Logger);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(b, nullptr);
  nccl.Collective(a, 0, 2);  // what NCCL does with a communicator that has no context
  nccl.Finalize(a);
  EXPECT_EQ(g_log.Count(abi::kLogWarn, ""), 1);
  EXPECT_EQ(g_log.Count(abi::kLogWarn,
                        "ncclwatch: disabled: cannot load " + dir_ + "/libncclwatch-hostlibc.so"),
            1);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the loader then keeps the engine in the host's namespace
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Runs plugin_trap_host with the symbol traps and `isolation` (NCCLWATCH_ISOLATION); its status.
int RunTrapHost(const char* isolation) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("NCCLWATCH_ISOLATION", isolation, 1);
    execl(NCCLWATCH_TRAP_HOST, NCCLWATCH_TRAP_HOST, NCCLWATCH_SYMBOL_TRAPS, NCCLWATCH_PLUGIN_SO,
          nullptr);
    _exit(127);
  }
  return pid > 0 ? WaitChild(pid, std::chrono::milliseconds(30000)) : -3;
}

TEST_F(LifecycleTest, AHostWhoseLibrariesDefineThePluginsSymbolsAsTrapsRunsAndReports) {
  if (kSanitized) GTEST_SKIP() << "sanitizer builds load the engine without isolation";
  FakeAgent agent(socket_, "read");
  ASSERT_TRUE(agent.WaitFor("listening"));
  const int status = RunTrapHost("namespace");
  ASSERT_NE(status, -1) << "the host did not exit";
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status)
                                 << " (SIGABRT: a trap fired, see its stderr)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "4: a plugin library is in the host's namespace";
  EXPECT_TRUE(agent.WaitFor("report"));
  EXPECT_TRUE(agent.WaitFor("half-closed"));  // both communicators finalized
}

// The same host without isolation: the traps fire, so the test above can fail.
TEST_F(LifecycleTest, WithoutIsolationTheSameHostHitsATrap) {
  if (kSanitized) GTEST_SKIP() << "sanitizer builds load the engine without isolation";
  const int status = RunTrapHost("none");
  ASSERT_NE(status, -1) << "the host did not exit";
  ASSERT_TRUE(WIFSIGNALED(status)) << "exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
}

}  // namespace
}  // namespace ncclwatch::testing
