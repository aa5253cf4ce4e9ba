// Test and benchmark helper: descriptors built the way NCCL builds them (zeroed, then filled).
#ifndef NCCLWATCH_PLUGIN_ABI_TESTING_H_
#define NCCLWATCH_PLUGIN_ABI_TESTING_H_

#include <cstring>

#include "plugin/abi.h"

namespace ncclwatch::abi {

inline EventDescrV5 MakeDescrV5(uint64_t type, void* parent) {
  EventDescrV5 d;
  std::memset(&d, 0, sizeof(d));
  d.type = type;
  d.parent_obj = parent;
  return d;
}

inline EventDescrV6 MakeDescrV6(uint64_t type, void* parent) {
  EventDescrV6 d;
  std::memset(&d, 0, sizeof(d));
  d.type = type;
  d.parent_obj = parent;
  return d;
}

inline EventDescrV4 MakeDescrV4(uint8_t type, void* parent) {
  EventDescrV4 d;
  std::memset(&d, 0, sizeof(d));
  d.type = type;
  d.parent_obj = parent;
  return d;
}

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_TESTING_H_
