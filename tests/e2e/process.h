// Test helper: runs a program as a child process with its output in a log file, optionally
// waiting for its readiness line on a pipe (the daemons' --ready-fd), so tests never sleep to
// find out whether a server is up.
#ifndef NCCLWATCH_TESTS_E2E_PROCESS_H_
#define NCCLWATCH_TESTS_E2E_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ncclwatch::testing {

class Process {
 public:
  // Starts `argv` with `env` added to the environment. With `ready_flag` (e.g. "--ready-fd"),
  // appends "<ready_flag>=<fd>" and blocks until the child writes its ready line or exits.
  Process(std::vector<std::string> argv, std::map<std::string, std::string> env,
          std::string log_path, const std::string& ready_flag = "");
  ~Process();  // SIGKILLs a child that is still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  bool started() const { return pid_ > 0; }
  int pid() const { return static_cast<int>(pid_); }
  // Integer value of "key=N" in the ready line, or -1.
  int ReadyValue(const std::string& key) const;
  void Signal(int sig);
  // Waits for exit; returns the exit code, or 128+signal.
  int Wait();
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string ready_line_;
  std::string log_path_;
};

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_TESTS_E2E_PROCESS_H_
