// A stand-in node agent for the plugin's lifecycle tests: serves ncclwatch.v1.Agent/StreamReports
// on a unix socket through gRPC's generic (byte-level) service and says what happens, one line per
// event on stdout, so that a test can wait for an event instead of sleeping:
//
//   listening                    the socket accepts streams
//   report <stream> <bytes>      a message of stream <stream> was read
//   half-closed <stream>         the plugin ended its writes (finalize or exit is draining)
//
//   plugin_fake_agent --socket=PATH [--mode=read|stall-at-close]
//
// read: reads everything and ends each stream when the plugin half-closes it.
// stall-at-close: reads everything but never ends a stream: a plugin draining at finalize waits
// for it, as it would for a stopped or overloaded agent.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"

namespace {

std::mutex g_out_mu;
std::atomic<int> g_next_stream{0};

void Say(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_out_mu);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

class Reactor : public grpc::ServerGenericBidiReactor {
 public:
  explicit Reactor(bool stall) : stall_(stall), id_(g_next_stream.fetch_add(1)) {
    StartRead(&buffer_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Say("half-closed " + std::to_string(id_));
      if (!stall_) Finish(grpc::Status::OK);
      return;
    }
    Say("report " + std::to_string(id_) + " " + std::to_string(buffer_.Length()));
    buffer_.Clear();
    StartRead(&buffer_);
  }
  void OnCancel() override {
    if (stall_) Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override { delete this; }

 private:
  const bool stall_;
  const int id_;
  grpc::ByteBuffer buffer_;
};

class Service : public grpc::CallbackGenericService {
 public:
  explicit Service(bool stall) : stall_(stall) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new Reactor(stall_);
  }

 private:
  const bool stall_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string socket, mode = "read";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s --socket=PATH [--mode=read|stall-at-close]\n", argv[0]);
      return 0;
    } else if (a.rfind("--socket=", 0) == 0) {
      socket = a.substr(9);
    } else if (a.rfind("--mode=", 0) == 0) {
      mode = a.substr(7);
    } else {
      std::fprintf(stderr, "plugin_fake_agent: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (socket.empty() || (mode != "read" && mode != "stall-at-close")) {
    std::fprintf(stderr,
                 "plugin_fake_agent: --socket is required; --mode is read or "
                 "stall-at-close\n");
    return 2;
  }
  unlink(socket.c_str());
  Service service(mode == "stall-at-close");
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "plugin_fake_agent: cannot listen on %s\n", socket.c_str());
    return 1;
  }
  Say("listening");
  server->Wait();  // until the test kills it
  return 0;
}
