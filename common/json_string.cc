#include "common/json_string.h"

#include "absl/strings/str_format.h"

namespace ncclwatch {

void AppendJsonString(std::string* out, std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      bool valid = n > 0 && i + n <= text.size();
      for (size_t k = 1; valid && k < n; ++k) {
        valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      }
      out->append(valid ? text.substr(i, n) : std::string_view("\\ufffd"));
      i += valid ? n : 1;
      continue;
    }
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      out->append(absl::StrFormat("\\u%04x", c));
    } else {
      out->push_back(static_cast<char>(c));
    }
    ++i;
  }
}

}  // namespace ncclwatch
