// RESP2, the Redis serialization protocol (https://redis.io/docs/reference/protocol-spec/), as a
// server reads requests and writes replies: the wire format of //tools:kv_resp, the gateway that
// lets redis-cli, redis-benchmark and Redis client libraries use the key-value store.
//
//   std::string in = ...;  // bytes received so far
//   size_t used = 0;
//   for (;;) {
//     resp::Request r = resp::ParseRequest(absl::string_view(in).substr(used), limits);
//     if (r.kind == resp::Request::kIncomplete) break;  // read more
//     if (r.kind == resp::Request::kError) { reply "-ERR " + r.error, then close; }
//     used += r.consumed;
//     if (r.kind == resp::Request::kCommand) answer r.args, appending to `out` with
//                                             resp::AppendReply(reply, &out);
//   }
//   in.erase(0, used);
//
// A request is either a multibulk, an array of bulk strings (*2\r\n$3\r\nGET\r\n$1\r\na\r\n:
// binary-safe arguments, what clients send), or an inline command, a line of words split as
// redis-server splits them (telnet's "PING\r\n"; "double quotes" with \n \r \t \b \a \xHH
// escapes, 'single quotes' with \' only). As redis-server: an empty line or a multibulk of 0 (or
// a negative count) is no command; a bulk's terminator is skipped, not checked; the errors are
// redis-server 7's texts ("Protocol error: invalid bulk length", ...), after which the
// connection must be closed, since where the next request starts is unknown.
#ifndef FARM_TOOLS_RESP_H_
#define FARM_TOOLS_RESP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tools/kvsh_lib.h"

namespace farm {
namespace resp {

struct Limits {
  // Largest bulk string (an argument): larger is "invalid bulk length". kv_resp: the store's
  // value limit (a key is smaller).
  uint64_t max_bulk = 1 << 20;
  // Most arguments in one multibulk: more is "invalid multibulk length".
  uint64_t max_args = 1 << 20;
  // Bytes of a whole multibulk request (headers included): more is "request too large".
  uint64_t max_request = 64 << 20;
  // Longest inline command and count line, as redis-server's PROTO_INLINE_MAX_SIZE.
  uint64_t max_inline = 64 << 10;
};

struct Request {
  enum Kind {
    kIncomplete,  // the buffer ends inside the request: read more, parse again from its start
    kEmpty,       // an empty line or *0: no command; `consumed` bytes
    kCommand,     // `args` (the command name first); `consumed` bytes
    kError,       // a protocol error (`error`, without "ERR "): reply and close
  };
  Kind kind = kIncomplete;
  size_t consumed = 0;
  std::vector<std::string> args;
  std::string error;
};

// The request at the start of `buffer`. Bytes after it are left alone (pipelining: call again
// on the rest). Costs O(request) for a complete request and O(headers) for an incomplete one.
Request ParseRequest(absl::string_view buffer, const Limits& limits);

// Appends `reply` in RESP2: status +..., error -... (a \r or \n in a status or error becomes a
// space, since they end the line), nil $-1, string $N bulk, integer :N, array *N (nested), text
// (kvsh's preformatted help, stats, info) a bulk string with \r\n line ends, as Redis's INFO.
void AppendReply(const kvsh::Reply& reply, std::string* out);

// Helpers for replies a server builds by hand.
std::string ErrorLine(absl::string_view message);  // "-" message "\r\n"

}  // namespace resp
}  // namespace farm

#endif  // FARM_TOOLS_RESP_H_
