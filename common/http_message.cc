// Parsing of request heads and query strings, and serialisation of responses, for
// common/http_server.cc.
#include "common/http_message.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ncclwatch {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else if (c == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "";
  }
}

}  // namespace

namespace http_internal {

std::string SerializeResponse(const HttpResponse& res, bool head) {
  std::string out = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n",
      res.status, Reason(res.status), res.content_type, res.body.size());
  for (const auto& [name, value] : res.headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  out += "\r\n";
  if (!head) out += res.body;
  return out;
}

std::string PlainResponse(int status, std::string_view text) {
  HttpResponse res;
  res.status = status;
  res.body = std::string(text) + "\n";
  return SerializeResponse(res, false);
}

bool ParseRequestHead(std::string_view head, HttpRequest* req) {
  const size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) return false;
  req->method = std::string(line.substr(0, sp1));
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const size_t q = target.find('?');
  req->path = Decode(target.substr(0, q), false);
  if (q != std::string_view::npos) req->params = HttpServer::ParseQuery(target.substr(q + 1));
  if (line_end == std::string_view::npos) return true;
  std::string_view rest = head.substr(line_end + 2);
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    std::string_view h = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    req->headers.emplace_back(Lower(h.substr(0, colon)), std::string(Trim(h.substr(colon + 1))));
  }
  return true;
}

}  // namespace http_internal

size_t HttpRequest::ParamCount(std::string_view name) const {
  return std::count_if(params.begin(), params.end(),
                       [&](const auto& p) { return p.first == name; });
}

std::string HttpRequest::Param(std::string_view name, size_t i) const {
  for (const auto& [key, value] : params) {
    if (key == name && i-- == 0) return value;
  }
  return "";
}

std::string HttpRequest::Header(std::string_view name) const {
  const std::string lower = Lower(name);
  for (const auto& [key, value] : headers) {
    if (key == lower) return value;
  }
  return "";
}

std::vector<std::pair<std::string, std::string>> HttpServer::ParseQuery(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    out.emplace_back(Decode(pair.substr(0, eq), true),
                     eq == std::string_view::npos ? "" : Decode(pair.substr(eq + 1), true));
  }
  return out;
}

}  // namespace ncclwatch
