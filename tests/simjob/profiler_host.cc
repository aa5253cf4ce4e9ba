#include "tests/simjob/profiler_host.h"

#include <dlfcn.h>

namespace ncclwatch::simjob {
namespace {

// Descendants of a Coll or P2p task: enabling any of them makes NCCL emit the task itself.
constexpr uint64_t kTaskChildren =
    abi::kProxyOp | abi::kProxyStep | abi::kKernelCh | abi::kNetPlugin;

abi::EventDescrV5 ToV5(const abi::EventDescrV6& in) {
  abi::EventDescrV5 out{};
  out.type = in.type;
  out.parent_obj = in.parent_obj;
  out.rank = in.rank;
  // Union members 1-10 are the same types in v5 and v6; copy the active one.
  switch (in.type) {
    case abi::kGroupApi:
      out.group_api = in.group_api;
      break;
    case abi::kCollApi:
      out.coll_api = in.coll_api;
      break;
    case abi::kP2pApi:
      out.p2p_api = in.p2p_api;
      break;
    case abi::kKernelLaunch:
      out.kernel_launch = in.kernel_launch;
      break;
    case abi::kColl:
      out.coll = in.coll;
      break;
    case abi::kP2p:
      out.p2p = in.p2p;
      break;
    case abi::kKernelCh:
      out.kernel_ch = in.kernel_ch;
      break;
    default:  // Group has no payload; simjob emits no other types
      break;
  }
  return out;
}

abi::EventDescrV4 ToV4(const abi::EventDescrV6& in) {
  abi::EventDescrV4 out{};
  out.type = static_cast<uint8_t>(in.type);  // v4 types all fit in bits 0-7
  out.parent_obj = in.parent_obj;
  out.rank = in.rank;
  switch (in.type) {
    case abi::kColl: {
      const abi::CollDescrV5& c = in.coll;
      out.coll = {.seq_number = c.seq_number,
                  .func = c.func,
                  .send_buff = c.send_buff,
                  .recv_buff = c.recv_buff,
                  .count = c.count,
                  .root = c.root,
                  .datatype = c.datatype,
                  .n_channels = c.n_channels,
                  .n_warps = c.n_warps,
                  .algo = c.algo,
                  .proto = c.proto};
      break;
    }
    case abi::kP2p: {
      const abi::P2pDescrV5& p = in.p2p;
      out.p2p = {.func = p.func,
                 .buff = p.buff,
                 .datatype = p.datatype,
                 .count = p.count,
                 .peer = p.peer,
                 .n_channels = p.n_channels};
      break;
    }
    case abi::kKernelCh:
      out.kernel_ch = in.kernel_ch;
      break;
    default:
      break;
  }
  return out;
}

}  // namespace

bool EventEnabled(uint64_t type, int mask) {
  const uint64_t m = static_cast<uint32_t>(mask);
  switch (type) {
    case abi::kGroup:
      return m & (abi::kGroup | abi::kColl | abi::kP2p | kTaskChildren);
    case abi::kColl:
      return m & (abi::kColl | kTaskChildren);
    case abi::kP2p:
      return m & (abi::kP2p | kTaskChildren);
    case abi::kCollApi:
      return m & (abi::kCollApi | abi::kColl | kTaskChildren | abi::kCeColl | abi::kCeSync |
                  abi::kCeBatch);
    case abi::kP2pApi:
      return m & (abi::kP2pApi | abi::kP2p | kTaskChildren);
    case abi::kGroupApi:
      return m & ~static_cast<uint64_t>(abi::kProxyCtrl);
    default:  // KernelCh, KernelLaunch, ProxyCtrl, ...: only their own bit
      return m & type;
  }
}

std::unique_ptr<ProfilerHost> ProfilerHost::Load(const std::string& path, int abi_version,
                                                 std::string* error) {
  if (abi_version < 4 || abi_version > 6) {
    *error = "unsupported ABI version " + std::to_string(abi_version);
    return nullptr;
  }
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *error = std::string("dlopen failed: ") + dlerror();
    return nullptr;
  }
  const std::string symbol = "ncclProfiler_v" + std::to_string(abi_version);
  const void* table = dlsym(library, symbol.c_str());
  if (table == nullptr) {
    *error = path + " does not export " + symbol;
    dlclose(library);
    return nullptr;
  }
  return std::unique_ptr<ProfilerHost>(new ProfilerHost(library, abi_version, table));
}

ProfilerHost::ProfilerHost(void* library, int abi_version, const void* table)
    : library_(library), abi_version_(abi_version) {
  switch (abi_version) {
    case 4:
      v4_ = static_cast<const abi::ProfilerV4*>(table);
      break;
    case 5:
      v5_ = static_cast<const abi::ProfilerV5*>(table);
      break;
    default:
      v6_ = static_cast<const abi::ProfilerV6*>(table);
      break;
  }
}

ProfilerHost::~ProfilerHost() { dlclose(library_); }

const char* ProfilerHost::name() const {
  const char* n = v4_ ? v4_->name : v5_ ? v5_->name : v6_->name;
  return n != nullptr ? n : "?";
}

abi::Result ProfilerHost::Init(void** context, uint64_t comm_hash, int* mask, const char* comm_name,
                               int n_nodes, int nranks, int rank, abi::Logger logfn) {
  if (v4_) return v4_->init(context, mask, comm_name, comm_hash, n_nodes, nranks, rank, logfn);
  if (v5_) return v5_->init(context, comm_hash, mask, comm_name, n_nodes, nranks, rank, logfn);
  return v6_->init(context, comm_hash, mask, comm_name, n_nodes, nranks, rank, logfn);
}

void* ProfilerHost::Start(void* context, const abi::EventDescrV6& descr) {
  void* handle = nullptr;
  if (v4_) {
    abi::EventDescrV4 d = ToV4(descr);
    v4_->start_event(context, &handle, &d);
  } else if (v5_) {
    abi::EventDescrV5 d = ToV5(descr);
    v5_->start_event(context, &handle, &d);
  } else {
    abi::EventDescrV6 d = descr;  // the plugin gets a mutable copy, as from NCCL's stack
    v6_->start_event(context, &handle, &d);
  }
  events_started_.fetch_add(1, std::memory_order_relaxed);
  if (handle == nullptr) null_handles_.fetch_add(1, std::memory_order_relaxed);
  return handle;
}

void ProfilerHost::Stop(void* handle) {
  if (handle == nullptr) return;
  if (v4_) {
    v4_->stop_event(handle);
  } else if (v5_) {
    v5_->stop_event(handle);
  } else {
    v6_->stop_event(handle);
  }
}

void ProfilerHost::Record(void* handle, abi::EventState state, abi::StateArgs* args) {
  if (handle == nullptr) return;
  if (v4_) {
    v4_->record_event_state(handle, state, args);
  } else if (v5_) {
    v5_->record_event_state(handle, state, args);
  } else {
    v6_->record_event_state(handle, state, args);
  }
}

void ProfilerHost::Finalize(void* context) {
  if (v4_) {
    v4_->finalize(context);
  } else if (v5_) {
    v5_->finalize(context);
  } else {
    v6_->finalize(context);
  }
}

}  // namespace ncclwatch::simjob
