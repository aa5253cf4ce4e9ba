// Internal to common/http_server.cc: request heads in, responses out.
#ifndef NCCLWATCH_COMMON_HTTP_MESSAGE_H_
#define NCCLWATCH_COMMON_HTTP_MESSAGE_H_

#include <string>
#include <string_view>

#include "common/http_server.h"

namespace ncclwatch::http_internal {

// "HTTP/1.1 <status> ...", Content-Type, Content-Length, Connection: close, the response's own
// headers, then the body (left out for a HEAD request).
std::string SerializeResponse(const HttpResponse& res, bool head_only);
// A text/plain response holding `text` and a newline.
std::string PlainResponse(int status, std::string_view text);
// Parses a request head (request line and headers, without the blank line that ends it): the
// method, the percent-decoded path, the query parameters and the headers (names lower-cased).
// False when the request line is not "METHOD TARGET HTTP/1.x".
bool ParseRequestHead(std::string_view head, HttpRequest* req);

}  // namespace ncclwatch::http_internal

#endif  // NCCLWATCH_COMMON_HTTP_MESSAGE_H_
