// Small string helpers shared by the daemons and the plugin.
//
// Debian 12's abseil is built with its own absl::string_view rather than an alias of
// std::string_view, so the two do not convert implicitly. Av() converts at the boundary.
#ifndef NCCLWATCH_COMMON_STRINGS_H_
#define NCCLWATCH_COMMON_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace ncclwatch {

inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A C string NCCL may leave null (an algorithm, a function name), as "Unknown" when it does: the
// value NCCL Inspector writes. The std::string overload is proto/inspector.h's.
inline const char* OrUnknown(const char* s) { return s != nullptr ? s : "Unknown"; }

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_STRINGS_H_
