// Test only: a strict JSON reader (RFC 8259), to check what the CLI writes at the level of its
// structure. It accepts one value (object, array, string with every escape, number, true, false,
// null) surrounded by whitespace and nothing else, and rejects a repeated key.
//
// Not protobuf's google.protobuf.Struct: its map fields have another layout in a ThreadSanitizer
// build (map_field.h adds members) than in Debian's libprotobuf, so reading one crashes there.
#ifndef NCCLWATCH_AGGREGATOR_CLI_JSON_READER_TEST_UTIL_H_
#define NCCLWATCH_AGGREGATOR_CLI_JSON_READER_TEST_UTIL_H_

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ncclwatch::cli {

struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::string> keys;  // an object's members, in order: keys[i] -> values[i]
  std::vector<Json> values;

  // The member `key` of an object; a null value when absent or not an object.
  const Json& operator[](std::string_view key) const {
    static const Json kNone;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return values[i];
    }
    return kNone;
  }
};

// The value `text` holds; std::nullopt if it is not exactly one valid JSON value.
inline std::optional<Json> ParseJson(std::string_view text) {
  class Reader {
   public:
    explicit Reader(std::string_view s) : s_(s) {}
    bool Document(Json* out) {
      if (!Value(out, 0)) return false;
      SkipSpace();
      return pos_ == s_.size();
    }

   private:
    void SkipSpace() {
      while (pos_ < s_.size() &&
             (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
        ++pos_;
      }
    }
    bool Consume(char c) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != c) return false;
      ++pos_;
      return true;
    }
    bool Literal(std::string_view word) {
      if (s_.substr(pos_, word.size()) != word) return false;
      pos_ += word.size();
      return true;
    }
    bool Value(Json* out, int depth) {
      SkipSpace();
      if (depth > 64 || pos_ >= s_.size()) return false;
      if (Consume('{')) {
        out->type = Json::kObject;
        if (Consume('}')) return true;
        do {
          std::string key;
          Json value;
          SkipSpace();
          if (!String(&key) || !Consume(':') || !Value(&value, depth + 1)) return false;
          for (const auto& k : out->keys) {
            if (k == key) return false;
          }
          out->keys.push_back(std::move(key));
          out->values.push_back(std::move(value));
        } while (Consume(','));
        return Consume('}');
      }
      if (Consume('[')) {
        out->type = Json::kArray;
        if (Consume(']')) return true;
        do {
          Json value;
          if (!Value(&value, depth + 1)) return false;
          out->array.push_back(std::move(value));
        } while (Consume(','));
        return Consume(']');
      }
      if (s_[pos_] == '"') {
        out->type = Json::kString;
        return String(&out->string);
      }
      if (Literal("true")) {
        out->type = Json::kBool;
        out->boolean = true;
        return true;
      }
      if (Literal("false")) {
        out->type = Json::kBool;
        return true;
      }
      if (Literal("null")) return true;
      return Number(out);
    }
    bool Hex4(unsigned* code) {
      if (pos_ + 4 > s_.size()) return false;
      *code = 0;
      for (int i = 0; i < 4; ++i) {
        const char c = s_[pos_++];
        const int digit = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (digit < 0) return false;
        *code = *code * 16 + static_cast<unsigned>(digit);
      }
      return true;
    }
    static void AppendUtf8(unsigned code, std::string* out) {
      if (code < 0x80) {
        out->push_back(static_cast<char>(code));
      } else if (code < 0x800) {
        out->push_back(static_cast<char>(0xc0 | (code >> 6)));
        out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
      } else if (code < 0x10000) {
        out->push_back(static_cast<char>(0xe0 | (code >> 12)));
        out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
        out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
      } else {
        out->push_back(static_cast<char>(0xf0 | (code >> 18)));
        out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3f)));
        out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
        out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
      }
    }
    bool String(std::string* out) {
      if (pos_ >= s_.size() || s_[pos_] != '"') return false;
      ++pos_;
      while (pos_ < s_.size()) {
        const char c = s_[pos_++];
        if (c == '"') return true;
        if (static_cast<unsigned char>(c) < 0x20) return false;  // must be escaped
        if (c != '\\') {
          out->push_back(c);
          continue;
        }
        if (pos_ >= s_.size()) return false;
        unsigned code = 0;
        switch (s_[pos_++]) {
          case '"':
            out->push_back('"');
            break;
          case '\\':
            out->push_back('\\');
            break;
          case '/':
            out->push_back('/');
            break;
          case 'b':
            out->push_back('\b');
            break;
          case 'f':
            out->push_back('\f');
            break;
          case 'n':
            out->push_back('\n');
            break;
          case 'r':
            out->push_back('\r');
            break;
          case 't':
            out->push_back('\t');
            break;
          case 'u':
            if (!Hex4(&code) || (code >= 0xdc00 && code < 0xe000)) return false;
            if (code >= 0xd800 && code < 0xdc00) {  // a surrogate pair
              unsigned low = 0;
              if (!Literal("\\u") || !Hex4(&low) || low < 0xdc00 || low >= 0xe000) return false;
              code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            }
            AppendUtf8(code, out);
            break;
          default:
            return false;
        }
      }
      return false;
    }
    // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    bool Number(Json* out) {
      const size_t start = pos_;
      auto digits = [&] {
        const size_t from = pos_;
        while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
        return pos_ - from;
      };
      if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '0') {
        ++pos_;
      } else if (digits() == 0) {
        return false;
      }
      if (pos_ < s_.size() && s_[pos_] == '.') {
        ++pos_;
        if (digits() == 0) return false;
      }
      if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
        ++pos_;
        if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
        if (digits() == 0) return false;
      }
      out->type = Json::kNumber;
      out->number = std::strtod(std::string(s_.substr(start, pos_ - start)).c_str(), nullptr);
      return true;
    }

    std::string_view s_;
    size_t pos_ = 0;
  };
  Json out;
  if (!Reader(text).Document(&out)) return std::nullopt;
  return out;
}

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_JSON_READER_TEST_UTIL_H_
