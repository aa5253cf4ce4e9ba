// What was built: the release version (the CMake project version) and the git revision of the
// source tree at configure time ("unknown" outside a git checkout). Printed by every binary's
// --version and exported as the daemons' *_build_info metric.
#ifndef NCCLWATCH_COMMON_BUILD_INFO_H_
#define NCCLWATCH_COMMON_BUILD_INFO_H_

#include <string>
#include <string_view>

namespace ncclwatch {

const char* BuildVersion();   // e.g. "0.1.0"
const char* BuildRevision();  // e.g. "9805550", "9805550-dirty" or "unknown"
// "<program> <version> (git <revision>)", the --version line.
std::string VersionText(std::string_view program);

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_BUILD_INFO_H_
