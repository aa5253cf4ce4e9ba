// Test and benchmark helper: descriptors built the way NCCL builds them (zeroed, then filled).
#ifndef NCCLWATCH_PLUGIN_ABI_TESTING_H_
#define NCCLWATCH_PLUGIN_ABI_TESTING_H_

#include <cstring>

#include "plugin/abi.h"
#include "plugin/abi_v7.h"

namespace ncclwatch::abi {

// Any descriptor version: zeroed, then the header filled (v4's type is one byte).
template <typename Descr>
Descr MakeDescr(uint64_t type, void* parent) {
  Descr d;
  std::memset(&d, 0, sizeof(d));
  d.type = static_cast<decltype(d.type)>(type);
  d.parent_obj = parent;
  return d;
}

inline EventDescrV4 MakeDescrV4(uint8_t type, void* parent) {
  return MakeDescr<EventDescrV4>(type, parent);
}
inline EventDescrV5 MakeDescrV5(uint64_t type, void* parent) {
  return MakeDescr<EventDescrV5>(type, parent);
}
inline EventDescrV6 MakeDescrV6(uint64_t type, void* parent) {
  return MakeDescr<EventDescrV6>(type, parent);
}
inline EventDescrV7 MakeDescrV7(uint64_t type, void* parent) {
  return MakeDescr<EventDescrV7>(type, parent);
}

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_TESTING_H_
