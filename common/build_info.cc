#include "common/build_info.h"

#include "absl/strings/str_cat.h"
#include "common/strings.h"

#ifndef NCCLWATCH_VERSION
#error "NCCLWATCH_VERSION is set by common/CMakeLists.txt"
#endif
#ifndef NCCLWATCH_REVISION
#define NCCLWATCH_REVISION "unknown"
#endif

namespace ncclwatch {

const char* BuildVersion() { return NCCLWATCH_VERSION; }
const char* BuildRevision() { return NCCLWATCH_REVISION; }

std::string VersionText(std::string_view program) {
  return absl::StrCat(Av(program), " ", BuildVersion(), " (git ", BuildRevision(), ")");
}

}  // namespace ncclwatch
