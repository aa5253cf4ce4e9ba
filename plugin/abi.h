// Every version of the NCCL profiler plugin interface we speak: the shared part (abi_common.h) and
// one header per version (abi_v4.h ... abi_v7.h), as NCCL keeps one profiler_vN.h per version.
#ifndef NCCLWATCH_PLUGIN_ABI_H_
#define NCCLWATCH_PLUGIN_ABI_H_

#include "plugin/abi_common.h"
#include "plugin/abi_v4.h"
#include "plugin/abi_v5.h"
#include "plugin/abi_v6.h"
#include "plugin/abi_v7.h"

#endif  // NCCLWATCH_PLUGIN_ABI_H_
