#include "aggregator/query/selector.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ncclwatch::aggregator {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<Selector> Parse() {
    Selector sel;
    SkipSpace();
    if (Peek() != '{') {
      std::string name = Identifier(/*allow_colon=*/true);
      if (name.empty()) return Error("expected a metric name or '{'");
      sel.matchers.push_back({"__name__", LabelMatcher::Op::kEq, name, nullptr});
      SkipSpace();
    }
    if (Peek() == '{') {
      ++pos_;
      for (;;) {
        SkipSpace();
        if (Peek() == '}') {
          ++pos_;
          break;
        }
        auto matcher = Matcher();
        if (!matcher.ok()) return matcher.status();
        sel.matchers.push_back(*std::move(matcher));
        SkipSpace();
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        if (Peek() == '}') {
          ++pos_;
          break;
        }
        return Error("expected ',' or '}' after a label matcher");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected trailing characters");
    bool non_empty = std::any_of(sel.matchers.begin(), sel.matchers.end(),
                                 [](const LabelMatcher& m) { return !m.Matches(""); });
    if (!non_empty) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "selector \"%s\": a selector needs at least one matcher that does not match the empty "
          "string",
          std::string(text_)));
    }
    return sel;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrFormat("selector \"%s\": %s at position %d",
                                                      std::string(text_), std::string(what), pos_));
  }
  std::string Identifier(bool allow_colon) {
    size_t start = pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
                (allow_colon && c == ':') ||
                (pos_ > start && std::isdigit(static_cast<unsigned char>(c)));
      if (!ok) break;
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  absl::StatusOr<std::string> StringLiteral() {
    char quote = Peek();
    if (quote != '"' && quote != '\'' && quote != '`') return Error("expected a quoted string");
    ++pos_;
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      char c = text_[pos_++];
      if (c == '\\' && quote != '`') {
        if (pos_ >= text_.size()) break;
        char e = text_[pos_++];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case '\\':
          case '"':
          case '\'':
            out += e;
            break;
          default:
            out += '\\';
            out += e;  // keep regex escapes such as \d intact
        }
        continue;
      }
      out += c;
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    ++pos_;
    return out;
  }
  absl::StatusOr<LabelMatcher> Matcher() {
    LabelMatcher m;
    m.name = Identifier(/*allow_colon=*/false);
    if (m.name.empty()) return Error("expected a label name");
    SkipSpace();
    std::string_view rest = text_.substr(pos_);
    if (rest.starts_with("=~")) {
      m.op = LabelMatcher::Op::kRe;
      pos_ += 2;
    } else if (rest.starts_with("!~")) {
      m.op = LabelMatcher::Op::kNre;
      pos_ += 2;
    } else if (rest.starts_with("!=")) {
      m.op = LabelMatcher::Op::kNe;
      pos_ += 2;
    } else if (rest.starts_with("=")) {
      m.op = LabelMatcher::Op::kEq;
      pos_ += 1;
    } else {
      return Error("expected one of =, !=, =~, !~");
    }
    SkipSpace();
    auto value = StringLiteral();
    if (!value.ok()) return value.status();
    m.value = *std::move(value);
    if (m.op == LabelMatcher::Op::kRe || m.op == LabelMatcher::Op::kNre) {
      // RE2, as PromQL: linear-time matching and bounded memory whatever the pattern, so a
      // hostile selector cannot stall or exhaust the aggregator. FullMatch anchors it.
      RE2::Options options;
      options.set_log_errors(false);
      options.set_max_mem(1 << 20);
      auto re = std::make_shared<const RE2>(m.value, options);
      if (!re->ok()) {
        return Error(
            absl::StrFormat("invalid regular expression \"%s\" (%s)", m.value, re->error()));
      }
      m.regex = std::move(re);
    }
    return m;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

const std::string* LabelValue(const std::string& metric, const LabelPairs& labels,
                              const std::string& name) {
  if (name == "__name__") return &metric;
  for (const auto& [k, v] : labels) {
    if (k == name) return &v;
  }
  return nullptr;
}

}  // namespace

bool LabelMatcher::Matches(const std::string& v) const {
  switch (op) {
    case Op::kEq:
      return v == value;
    case Op::kNe:
      return v != value;
    case Op::kRe:
      return RE2::FullMatch(v, *regex);
    case Op::kNre:
      return !RE2::FullMatch(v, *regex);
  }
  return false;
}

bool Selector::Matches(const SeriesPoint& sample) const {
  return Matches(sample.name, sample.labels);
}

bool Selector::Matches(const std::string& name, const LabelPairs& labels) const {
  static const std::string kEmpty;
  for (const LabelMatcher& m : matchers) {
    const std::string* v = LabelValue(name, labels, m.name);
    if (!m.Matches(v != nullptr ? *v : kEmpty)) return false;  // absent label == ""
  }
  return true;
}

bool Selector::MayMatchName(const std::string& name) const {
  for (const LabelMatcher& m : matchers) {
    if (m.name == "__name__" && !m.Matches(name)) return false;
  }
  return true;
}

absl::StatusOr<Selector> ParseSelector(std::string_view text) { return Parser(text).Parse(); }

}  // namespace ncclwatch::aggregator
