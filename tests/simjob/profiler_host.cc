#include "tests/simjob/profiler_host.h"

#include <dlfcn.h>

#include <cstring>
#include <type_traits>

namespace ncclwatch::simjob {
namespace {

// Descendants of a Coll or P2p task: enabling any of them makes NCCL emit the task itself.
constexpr uint64_t kTaskChildren =
    abi::kProxyOp | abi::kProxyStep | abi::kKernelCh | abi::kNetPlugin | abi::kKernelPhase;

// The header of `in`, and its active union member when `Out` has a member of the same name and
// type (NCCL's shims copy those as they are). Returns false when the caller must convert the
// member: its type changed, or `Out` has no such member (then it stays zeroed).
template <typename Out, typename In>
bool CopyHeaderAndUnchangedMember(const In& in, Out* out) {
  std::memset(out, 0, sizeof(*out));
  out->type = in.type;
  out->parent_obj = in.parent_obj;
  out->rank = in.rank;
  auto copy = [](const auto& from, auto& to) {
    if constexpr (std::is_same_v<std::decay_t<decltype(from)>, std::decay_t<decltype(to)>>) {
      to = from;
      return true;
    } else {
      return false;
    }
  };
  switch (in.type) {
    case abi::kGroup:
      return true;  // no payload
    case abi::kGroupApi:
      return copy(in.group_api, out->group_api);
    case abi::kCollApi:
      return copy(in.coll_api, out->coll_api);
    case abi::kP2pApi:
      return copy(in.p2p_api, out->p2p_api);
    case abi::kKernelLaunch:
      return copy(in.kernel_launch, out->kernel_launch);
    case abi::kColl:
      return copy(in.coll, out->coll);
    case abi::kP2p:
      return copy(in.p2p, out->p2p);
    case abi::kProxyOp:
      return copy(in.proxy_op, out->proxy_op);
    case abi::kProxyStep:
      return copy(in.proxy_step, out->proxy_step);
    case abi::kKernelCh:
      return copy(in.kernel_ch, out->kernel_ch);
    case abi::kNetPlugin:
      return copy(in.net_plugin, out->net_plugin);
    default:
      break;
  }
  // The copy-engine members exist from v6 on.
  if constexpr (requires { out->ce_coll; }) {
    if (in.type == abi::kCeColl) return copy(in.ce_coll, out->ce_coll);
    if (in.type == abi::kCeSync) return copy(in.ce_sync, out->ce_sync);
    if (in.type == abi::kCeBatch) return copy(in.ce_batch, out->ce_batch);
  }
  return false;
}

// v7 -> v6: the same union members, less the user tags and the symmetric-kernel fields;
// KernelPhase never reaches a v6 plugin.
abi::EventDescrV6 ToV6(const abi::EventDescrV7& in) {
  abi::EventDescrV6 out;
  if (CopyHeaderAndUnchangedMember(in, &out)) return out;
  switch (in.type) {
    case abi::kCollApi: {
      const abi::CollApiDescrV7& a = in.coll_api;
      out.coll_api = {a.func, a.count, a.datatype, a.root, a.stream, a.graph_captured};
      break;
    }
    case abi::kP2pApi: {
      const abi::P2pApiDescrV7& a = in.p2p_api;
      out.p2p_api = {a.func, a.count, a.datatype, a.stream, a.graph_captured};
      break;
    }
    case abi::kColl: {
      const abi::CollDescrV7& c = in.coll;
      out.coll = {c.seq_number, c.func,       c.send_buff, c.recv_buff, c.count, c.root,
                  c.datatype,   c.n_channels, c.n_warps,   c.algo,      c.proto, c.parent_group};
      break;
    }
    case abi::kP2p: {
      const abi::P2pDescrV7& p = in.p2p;
      out.p2p = {p.func, p.buff, p.datatype, p.count, p.peer, p.n_channels, p.parent_group};
      break;
    }
    case abi::kCeColl: {
      const abi::CeCollDescrV7& c = in.ce_coll;
      out.ce_coll = {c.seq_number,  c.func,       c.send_buff,     c.recv_buff,        c.count,
                     c.root,        c.datatype,   c.sync_strategy, c.intra_batch_sync, c.batch_size,
                     c.num_batches, c.ce_seq_num, c.stream};
      break;
    }
    default:
      break;
  }
  return out;
}

// v6 -> v5: members 1-10 are the same types; NCCL's v5 shim drops the copy-engine events.
abi::EventDescrV5 ToV5(const abi::EventDescrV6& in) {
  abi::EventDescrV5 out;
  CopyHeaderAndUnchangedMember(in, &out);
  return out;
}

abi::EventDescrV4 ToV4(const abi::EventDescrV6& in) {
  abi::EventDescrV4 out;
  std::memset(&out, 0, sizeof(out));
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
    case abi::kProxyOp:
      out.proxy_op = in.proxy_op;
      break;
    case abi::kProxyStep:
      out.proxy_step = in.proxy_step;
      break;
    case abi::kKernelCh:
      out.kernel_ch = in.kernel_ch;
      break;
    case abi::kNetPlugin:
      out.net_plugin = in.net_plugin;
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
    case abi::kKernelCh:  // NCCL turns KernelCh on for KernelPhase (§10)
      return m & (abi::kKernelCh | abi::kKernelPhase);
    case abi::kP2p:
      return m & (abi::kP2p | kTaskChildren);
    case abi::kCollApi:
      return m & (abi::kCollApi | abi::kColl | kTaskChildren | abi::kCeColl | abi::kCeSync |
                  abi::kCeBatch);
    case abi::kP2pApi:
      return m & (abi::kP2pApi | abi::kP2p | kTaskChildren);
    case abi::kGroupApi:
      return m & ~static_cast<uint64_t>(abi::kProxyCtrl);
    default:  // KernelPhase, KernelLaunch, ProxyCtrl, ...: only their own bit
      return m & type;
  }
}

std::unique_ptr<ProfilerHost> ProfilerHost::Load(const std::string& path, int abi_version,
                                                 std::string* error) {
  if (abi_version < 4 || abi_version > 7) {
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
    case 6:
      v6_ = static_cast<const abi::ProfilerV6*>(table);
      break;
    default:
      v7_ = static_cast<const abi::ProfilerV7*>(table);
      break;
  }
}

ProfilerHost::~ProfilerHost() { dlclose(library_); }

const char* ProfilerHost::name() const {
  const char* n = v4_ ? v4_->name : v5_ ? v5_->name : v6_ ? v6_->name : v7_->name;
  return n != nullptr ? n : "?";
}

abi::Result ProfilerHost::Init(void** context, uint64_t comm_hash, int* mask, const char* comm_name,
                               int n_nodes, int nranks, int rank, abi::Logger logfn) {
  if (v7_) return v7_->init(context, comm_hash, mask, comm_name, n_nodes, nranks, rank, logfn);
  abi::Result r;
  if (v4_) {
    r = v4_->init(context, mask, comm_name, comm_hash, n_nodes, nranks, rank, logfn);
  } else if (v5_) {
    r = v5_->init(context, comm_hash, mask, comm_name, n_nodes, nranks, rank, logfn);
  } else {
    r = v6_->init(context, comm_hash, mask, comm_name, n_nodes, nranks, rank, logfn);
  }
  *mask &= ~static_cast<int>(abi::kKernelPhase);  // v7 only
  return r;
}

void* ProfilerHost::Start(void* context, const abi::EventDescrV7& descr) {
  void* handle = nullptr;
  if (v7_) {
    abi::EventDescrV7 d = descr;  // the plugin gets a mutable copy, as from NCCL's stack
    v7_->start_event(context, &handle, &d);
  } else if (descr.type == abi::kKernelPhase) {
    return nullptr;  // v7 only: never shown to an older table
  } else if (v6_) {
    abi::EventDescrV6 d = ToV6(descr);
    v6_->start_event(context, &handle, &d);
  } else if (v5_) {
    abi::EventDescrV5 d = ToV5(ToV6(descr));
    v5_->start_event(context, &handle, &d);
  } else {
    abi::EventDescrV4 d = ToV4(ToV6(descr));
    v4_->start_event(context, &handle, &d);
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
  } else if (v6_) {
    v6_->stop_event(handle);
  } else {
    v7_->stop_event(handle);
  }
}

void ProfilerHost::Record(void* handle, abi::EventState state, abi::StateArgs* args) {
  if (handle == nullptr) return;
  if (v7_) {
    v7_->record_event_state(handle, state, args);
  } else if (state == abi::kKernelPhaseStop) {
    return;  // v7 only
  } else if (v4_) {
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
  } else if (v6_) {
    v6_->finalize(context);
  } else {
    v7_->finalize(context);
  }
}

}  // namespace ncclwatch::simjob
