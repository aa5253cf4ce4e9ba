// Shared by the libFuzzer targets: a check that aborts (so libFuzzer records the input) with a
// message, whatever the build type.
#ifndef NCCLWATCH_TESTS_FUZZ_FUZZ_UTIL_H_
#define NCCLWATCH_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>

#include "google/protobuf/stubs/logging.h"

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

// Protobuf logs every string field that is not UTF-8 as it refuses the message; the fuzzers make
// millions of them. The refusal itself is what they check.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

#endif  // NCCLWATCH_TESTS_FUZZ_FUZZ_UTIL_H_
