#include "tests/e2e/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ncclwatch::testing {

Process::Process(std::vector<std::string> argv, std::map<std::string, std::string> env,
                 std::string log_path, const std::string& ready_flag)
    : log_path_(std::move(log_path)) {
  int pipe_fds[2] = {-1, -1};
  if (!ready_flag.empty()) {
    if (pipe(pipe_fds) != 0) return;
    argv.push_back(ready_flag + "=" + std::to_string(pipe_fds[1]));
  }
  int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = fork();
  if (pid_ == 0) {
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    if (pipe_fds[0] >= 0) close(pipe_fds[0]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());  // a bare name is looked up in PATH
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  if (pipe_fds[1] >= 0) close(pipe_fds[1]);
  if (pipe_fds[0] >= 0) {
    // Blocks until the child writes its line and closes the pipe, or exits.
    char buf[256];
    ssize_t n;
    while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0) ready_line_.append(buf, n);
    close(pipe_fds[0]);
    while (!ready_line_.empty() && ready_line_.back() == '\n') ready_line_.pop_back();
  }
}

Process::~Process() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

int Process::ReadyValue(const std::string& key) const {
  std::istringstream in(ready_line_);
  std::string word;
  while (in >> word) {
    if (word.rfind(key + "=", 0) == 0) return std::atoi(word.c_str() + key.size() + 1);
  }
  return -1;
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

int Process::Wait() {
  if (pid_ <= 0) return -1;
  if (!reaped_) {
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

std::string Process::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ncclwatch::testing
