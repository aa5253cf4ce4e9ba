#include "plugin/adapter.h"

namespace ncclwatch::plugin::adapter {

abi::Result Init(void** context, uint64_t comm_id, int* mask, int wanted_mask,
                 const char* comm_name, int n_nodes, int nranks, int rank, abi::Logger logfn,
                 int kernel_phase_bit) noexcept {
  try {
    return InitCommunicator(context, comm_id, mask, wanted_mask, comm_name, n_nodes, nranks, rank,
                            logfn, kernel_phase_bit);
  } catch (...) {
    *context = nullptr;
    return abi::kSuccess;
  }
}

abi::Result StopEvent(void* handle) noexcept {
  if (Recorder* rec = ActiveRecorder()) rec->StopEvent(handle);
  return abi::kSuccess;
}

abi::Result RecordEventState(void* handle, abi::EventState state, abi::StateArgs* args) noexcept {
  if (args == nullptr || handle == nullptr) return abi::kSuccess;
  if (state != abi::kKernelChStop && state != abi::kKernelPhaseStop) return abi::kSuccess;
  if (Recorder* rec = ActiveRecorder()) RecordDecoded(*rec, rec->Decode(handle), state, args);
  return abi::kSuccess;
}

void RecordDecoded(Recorder& rec, const OpPool::Decoded& d, abi::EventState state,
                   abi::StateArgs* args) noexcept {
  if (args == nullptr) return;
  if (state == abi::kKernelChStop) {
    rec.RecordKernelChannelStop(d, args->kernel_ch.p_timer);
  } else if (state == abi::kKernelPhaseStop) {
    rec.RecordKernelPhaseStop(d, args->kernel_ch.p_timer);
  }
}

abi::Result Finalize(void* context) noexcept {
  try {
    return FinalizeCommunicator(context);
  } catch (...) {
    return abi::kSuccess;
  }
}

}  // namespace ncclwatch::plugin::adapter
