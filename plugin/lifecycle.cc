// The process-wide lifecycle object behind lifecycle.h: one per process, built at the first
// communicator init and intentionally leaked, like the Recorder it publishes.
#include "plugin/lifecycle.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/config.h"
#include "common/sync.h"
#include "plugin/agent_client.h"
#include "plugin/chain.h"
#include "plugin/composite_sink.h"
#include "plugin/flusher.h"
#include "plugin/gpu_uuid.h"
#include "plugin/offline_dump.h"
#include "plugin/plugin_config.h"
#include "plugin/training_rank.h"

namespace ncclwatch::plugin {

namespace internal {
std::atomic<Recorder*> g_recorder{nullptr};
}  // namespace internal

namespace {

std::atomic<bool> g_forked_child{false};
std::atomic<const ncclwatch_host_services*> g_host{nullptr};
std::atomic<void (*)()> g_thread_setup{nullptr};  // this namespace's __ctype_init, when isolated

void SetUpHostThread() {
  if (auto setup = g_thread_setup.load(std::memory_order_acquire)) setup();
}

int RegisterAtExit(void (*handler)()) {
  const ncclwatch_host_services* host = g_host.load();
  return host != nullptr ? host->atexit(handler) : std::atexit(handler);
}

void* HostSymbol(const char* name) {
  const ncclwatch_host_services* host = g_host.load();
  return host != nullptr ? host->symbol(name) : dlsym(RTLD_DEFAULT, name);
}

// Registered when the library loads, so that even a fork before the first init is covered.
__attribute__((constructor)) void RegisterForkHandler() {
  pthread_atfork(nullptr, nullptr, MarkForkedChild);
}

void ShutdownAtExit();

class Lifecycle {
 public:
  static Lifecycle& Get() {
    static Lifecycle* lifecycle = new Lifecycle();  // intentionally leaked, see g_recorder
    return *lifecycle;
  }

  abi::Result Init(void** context, uint64_t comm_hash, int* mask, int wanted_mask,
                   const char* comm_name, int n_nodes, int nranks, int rank, abi::Logger logfn,
                   int kernel_phase_bit) {
    *context = nullptr;
    ncclwatch::MutexLock lock(&mu_);
    if (logfn_ == nullptr) logfn_ = logfn;
    if (!started_) Start(comm_hash, logfn);
    if (!config_.enable || recorder_ == nullptr || shut_down_) return abi::kSuccess;
    const int device = CudaDevice();
    CommIdentity identity{comm_hash, comm_name != nullptr ? comm_name : "", rank, nranks, n_nodes,
                          device};
    identity.gpu_uuid = GpuUuidOf(gpu_uuids_, device);
    *context = recorder_->InitComm(std::move(identity));
    if (mask != nullptr) *mask = wanted_mask | (config_.kernel_phase ? kernel_phase_bit : 0);
    ++active_comms_;
    return abi::kSuccess;
  }

  abi::Result Finalize(void* context) {
    if (context == nullptr) return abi::kSuccess;
    ncclwatch::MutexLock lock(&mu_);
    if (shut_down_) return abi::kSuccess;  // already finalized at process exit
    flusher_->FinalizeComm(static_cast<CommState*>(context));
    // NCCL unloads the library after the last communicator: get its data out first.
    if (--active_comms_ == 0) {
      sink_->Drain(std::chrono::milliseconds(config_.finalize_timeout_ms));
    }
    return abi::kSuccess;
  }

  // Process exit: report what the last interval saw (jobs often never destroy communicators).
  // A forked child never gets here (see lifecycle.h); the pid check is a second guard.
  void Shutdown() {
    ncclwatch::MutexLock lock(&mu_);
    if (recorder_ == nullptr || shut_down_ || getpid() != owner_pid_) return;
    shut_down_ = true;
    flusher_->Stop();
    // Final reports: the aggregator then knows these ranks ended, rather than went silent.
    flusher_->FinalizeAll();
    agent_->Stop(std::chrono::milliseconds(config_.finalize_timeout_ms));
  }

 private:
  void Start(uint64_t first_comm_hash, abi::Logger logfn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    started_ = true;
    ConfigTable table("libnccl-profiler-ncclwatch.so", "");
    RegisterPluginConfig(table, config_);
    std::vector<std::string> warnings;
    absl::Status status = LoadPluginConfig(config_, ConfigTable::DefaultEnv(), &warnings);
    for (const std::string& w : warnings) Log(abi::kLogWarn, "ncclwatch: " + w);
    if (!status.ok()) {
      if (logfn) {
        logfn(abi::kLogWarn, abi::kLogSubsysProfile, __FILE__, __LINE__, "ncclwatch: disabled: %s",
              std::string(status.message()).c_str());
      }
      config_.enable = false;
      return;
    }
    if (logfn) {
      logfn(abi::kLogInfo, abi::kLogSubsysProfile, __FILE__, __LINE__, "ncclwatch: %s",
            config_.enable ? table.Describe().c_str() : "disabled by NCCLWATCH_ENABLE=0");
      const ncclwatch_host_services* host = g_host.load();
      logfn(abi::kLogInfo, abi::kLogSubsysProfile, __FILE__, __LINE__, "ncclwatch: loaded in %s",
            host != nullptr ? host->isolation : "the host's namespace (without its loader)");
      if (*chain::Problem() != '\0') {
        logfn(abi::kLogWarn, abi::kLogSubsysProfile, __FILE__, __LINE__,
              "ncclwatch: NCCLWATCH_CHAIN_PLUGIN: %s; running without it", chain::Problem());
      }
      if (chain::ChildVersion() != 0) {
        logfn(abi::kLogInfo, abi::kLogSubsysProfile, __FILE__, __LINE__,
              "ncclwatch: chained profiler plugin %s (ABI v%d) gets every event it asks for",
              chain::ChildName(), chain::ChildVersion());
      }
    }
    if (!config_.enable) return;

    ProcessIdentity identity;
    identity.job_id = JobId(first_comm_hash);
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    identity.host = host;
    owner_pid_ = getpid();
    identity.pid = static_cast<uint32_t>(owner_pid_);
    identity.report_id_prefix = static_cast<uint64_t>(std::random_device{}()) << 32;
    const TrainingRank training =
        TrainingRankFromEnv([](const char* name) -> const char* { return std::getenv(name); });
    identity.global_rank = training.global;
    identity.local_rank = training.local;
    // Read once: the device lists do not change during a process's life, and each communicator
    // init then only indexes this table with its CUDA device.
    gpu_uuids_ =
        VisibleGpuUuids(std::getenv("CUDA_VISIBLE_DEVICES"), std::getenv("NVIDIA_VISIBLE_DEVICES"));

    if (!config_.dump_dir.empty()) {
      const char* slurm = std::getenv("SLURM_JOB_ID");
      std::string error;
      dump_ = OfflineDump::Open(config_.dump_dir,
                                OfflineDump::Identity{identity.host, identity.pid,
                                                      slurm != nullptr ? slurm : "", CudaDevice()},
                                &error);
      if (!dump_ && logfn) {
        logfn(abi::kLogWarn, abi::kLogSubsysProfile, __FILE__, __LINE__,
              "ncclwatch: offline mode off: %s", error.c_str());
      }
    }
    recorder_ = std::make_unique<Recorder>(config_.op_pool_size, config_.ring_size,
                                           chain::ChildVersion() != 0);
    agent_ = std::make_unique<AgentClient>(
        config_.agent_addr, config_.max_queued_reports,
        [this](abi::LogLevel level, const std::string& message) { Log(level, message); });
    sink_ = agent_.get();
    if (dump_) {
      // The dump first: the last sink of a composite takes each report, the others a copy.
      composite_ = std::make_unique<CompositeSink>(std::vector<ReportSink*>{dump_.get(), sink_});
      sink_ = composite_.get();
    }
    flusher_ = std::make_unique<Flusher>(config_, *recorder_, identity, *sink_);
    flusher_->Start();
    // After the transport's libraries were loaded and built their statics: at exit, handlers run
    // in reverse order of registration, so ours runs before their destructors.
    RegisterAtExit(ShutdownAtExit);
    internal::g_recorder.store(recorder_.get(), std::memory_order_release);
  }

  // Through NCCL's logger (the first one an init gave us); without one, warnings go to stderr.
  void Log(abi::LogLevel level, const std::string& message) {
    abi::Logger logfn = logfn_.load();
    if (logfn != nullptr) {
      logfn(level, abi::kLogSubsysProfile, __FILE__, __LINE__, "%s", message.c_str());
    } else if (level == abi::kLogWarn) {
      std::fprintf(stderr, "%s\n", message.c_str());
    }
  }

  std::string JobId(uint64_t first_comm_hash) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!config_.job_id.empty()) return config_.job_id;
    for (const char* var : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
      const char* v = std::getenv(var);
      if (v != nullptr && *v != '\0') return v;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "comm-%016" PRIx64, first_comm_hash);
    return buf;
  }

  // The CUDA device of the calling thread (init runs on the thread that owns the device), when the
  // CUDA runtime is loaded; else LOCAL_RANK as launchers set it; else -1.
  static int CudaDevice() {
    using GetDevice = int (*)(int*);
    if (auto fn = reinterpret_cast<GetDevice>(HostSymbol("cudaGetDevice"))) {
      int device = -1;
      if (fn(&device) == 0) return device;
    }
    if (const char* local = std::getenv("LOCAL_RANK")) return std::atoi(local);
    return -1;
  }

  // Taken when a communicator comes or goes and at exit, never by an operation's event.
  ncclwatch::Mutex mu_;
  std::atomic<abi::Logger> logfn_{nullptr};  // also read by the agent client's thread
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;  // process exit: every communicator was finalized
  int active_comms_ ABSL_GUARDED_BY(mu_) = 0;
  pid_t owner_pid_ ABSL_GUARDED_BY(mu_) = 0;  // the process whose threads these are
  PluginConfig config_ ABSL_GUARDED_BY(mu_);
  // By CUDA ordinal, from the environment at Start.
  std::vector<std::string> gpu_uuids_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Recorder> recorder_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<AgentClient> agent_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<OfflineDump> dump_ ABSL_GUARDED_BY(mu_);         // offline mode only
  std::unique_ptr<CompositeSink> composite_ ABSL_GUARDED_BY(mu_);  // offline mode only
  ReportSink* sink_ ABSL_GUARDED_BY(mu_) = nullptr;  // the flusher's: composite_, else agent_
  std::unique_ptr<Flusher> flusher_ ABSL_GUARDED_BY(mu_);
};

// Registered with atexit at start (jobs often never destroy their communicators).
void ShutdownAtExit() { ShutdownPlugin(); }

}  // namespace

bool InForkedChild() { return g_forked_child.load(std::memory_order_relaxed); }

// Runs in the child before fork() returns there, while only the forking thread exists.
void MarkForkedChild() {
  g_forked_child.store(true, std::memory_order_relaxed);
  internal::g_recorder.store(nullptr, std::memory_order_relaxed);
}

void SetHostServices(const ncclwatch_host_services* services) { g_host.store(services); }

void EnableHostThreadSetup() {
  // dlopen from here searches this namespace: its libc, already loaded. __ctype_init is the
  // function glibc's own thread start calls; it is versioned GLIBC_PRIVATE, so looked up, not
  // linked.
  if (void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD)) {
    g_thread_setup.store(reinterpret_cast<void (*)()>(dlsym(libc, "__ctype_init")),
                         std::memory_order_release);
  }
}

abi::Result InitCommunicator(void** context, uint64_t comm_hash, int* mask, int wanted_mask,
                             const char* comm_name, int n_nodes, int nranks, int rank,
                             abi::Logger logfn, int kernel_phase_bit) {
  if (InForkedChild()) {
    *context = nullptr;
    return abi::kSuccess;
  }
  SetUpHostThread();
  return Lifecycle::Get().Init(context, comm_hash, mask, wanted_mask, comm_name, n_nodes, nranks,
                               rank, logfn, kernel_phase_bit);
}

abi::Result FinalizeCommunicator(void* context) {
  if (InForkedChild()) return abi::kSuccess;
  SetUpHostThread();
  return Lifecycle::Get().Finalize(context);
}

void ShutdownPlugin() {
  if (InForkedChild()) return;
  SetUpHostThread();
  Lifecycle::Get().Shutdown();
}

}  // namespace ncclwatch::plugin
