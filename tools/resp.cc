#include "tools/resp.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/kvsh_lib.h"

namespace farm {
namespace resp {
namespace {

// An integer as redis-server's string2ll reads one: an optional '-' and digits, nothing else.
bool ParseLength(absl::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!(absl::ascii_isdigit(static_cast<unsigned char>(s[i])) || (i == 0 && s[i] == '-'))) {
      return false;
    }
  }
  return absl::SimpleAtoi(s, out);
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\0'; }

// redis-server's sdssplitargs: false for unbalanced quotes (or a closing quote followed by
// something other than a space). A quote opens quoting inside a word too.
bool SplitInline(absl::string_view line, std::vector<std::string>* args) {
  size_t p = 0;
  for (;;) {
    while (p < line.size() && absl::ascii_isspace(static_cast<unsigned char>(line[p]))) ++p;
    if (p == line.size()) return true;
    std::string current;
    while (p < line.size() && !IsSpace(line[p])) {
      if (line[p] != '"' && line[p] != '\'') {
        current.push_back(line[p++]);
        continue;
      }
      if (!kvsh::ReadQuoted(line, &p, /*strict_hex=*/false, &current).ok()) return false;
      // The closing quote must be followed by a space or the end.
      if (p < line.size() && !absl::ascii_isspace(static_cast<unsigned char>(line[p]))) {
        return false;
      }
      break;
    }
    args->push_back(std::move(current));
  }
}

Request Error(std::string message) {
  Request r;
  r.kind = Request::kError;
  r.error = std::move(message);
  return r;
}

Request ParseInline(absl::string_view buffer, const Limits& limits) {
  const size_t nl = buffer.find('\n');
  if (nl == absl::string_view::npos) {
    if (buffer.size() > limits.max_inline) return Error("Protocol error: too big inline request");
    return Request{};
  }
  if (nl > limits.max_inline) return Error("Protocol error: too big inline request");
  absl::string_view line = buffer.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  Request r;
  if (!SplitInline(line, &r.args)) return Error("Protocol error: unbalanced quotes in request");
  r.consumed = nl + 1;
  r.kind = r.args.empty() ? Request::kEmpty : Request::kCommand;
  return r;
}

// The line at `pos` (without its \r\n) and where the next starts; false when it is not complete.
bool Line(absl::string_view buffer, size_t pos, absl::string_view* line, size_t* next) {
  const size_t end = buffer.find("\r\n", pos);
  if (end == absl::string_view::npos) return false;
  *line = buffer.substr(pos, end - pos);
  *next = end + 2;
  return true;
}

Request ParseMultibulk(absl::string_view buffer, const Limits& limits) {
  absl::string_view line;
  size_t pos = 0;
  if (!Line(buffer, 0, &line, &pos)) {
    if (buffer.size() > limits.max_inline) {
      return Error("Protocol error: too big mbulk count string");
    }
    return Request{};
  }
  int64_t count = 0;
  if (!ParseLength(line.substr(1), &count) || count > static_cast<int64_t>(limits.max_args)) {
    return Error("Protocol error: invalid multibulk length");
  }
  Request r;
  if (count <= 0) {
    r.kind = Request::kEmpty;
    r.consumed = pos;
    return r;
  }
  // The arguments are found first and copied once the whole request is there.
  std::vector<absl::string_view> args;
  for (int64_t i = 0; i < count; ++i) {
    size_t next = 0;
    if (!Line(buffer, pos, &line, &next)) {
      if (buffer.size() - pos > limits.max_inline) {
        return Error("Protocol error: too big bulk count string");
      }
      return Request{};
    }
    if (line.empty() || line[0] != '$') {
      return Error(absl::StrCat("Protocol error: expected '$', got '",
                                line.empty() ? absl::string_view("\r") : line.substr(0, 1), "'"));
    }
    int64_t length = 0;
    if (!ParseLength(line.substr(1), &length) || length < 0 ||
        static_cast<uint64_t>(length) > limits.max_bulk) {
      return Error("Protocol error: invalid bulk length");
    }
    if (next + static_cast<uint64_t>(length) + 2 > limits.max_request) {
      return Error(
          absl::StrCat("Protocol error: request larger than ", limits.max_request, " bytes"));
    }
    if (buffer.size() < next + static_cast<size_t>(length) + 2) return Request{};
    args.push_back(buffer.substr(next, static_cast<size_t>(length)));
    pos = next + static_cast<size_t>(length) + 2;  // the terminator is skipped, as Redis does
  }
  r.kind = Request::kCommand;
  r.consumed = pos;
  r.args.reserve(args.size());
  for (absl::string_view a : args) r.args.emplace_back(a);
  return r;
}

void AppendLine(char type, absl::string_view text, std::string* out) {
  out->push_back(type);
  for (char c : text) out->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out->append("\r\n");
}

void AppendBulk(absl::string_view bytes, std::string* out) {
  absl::StrAppend(out, "$", bytes.size(), "\r\n", bytes, "\r\n");
}

}  // namespace

Request ParseRequest(absl::string_view buffer, const Limits& limits) {
  if (buffer.empty()) return Request{};
  if (buffer[0] == '*') return ParseMultibulk(buffer, limits);
  return ParseInline(buffer, limits);
}

void AppendReply(const kvsh::Reply& reply, std::string* out) {
  using Kind = kvsh::Reply::Kind;
  switch (reply.kind) {
    case Kind::kStatus:
      AppendLine('+', reply.text, out);
      return;
    case Kind::kError:
      AppendLine('-', reply.text, out);
      return;
    case Kind::kNil:
      out->append("$-1\r\n");
      return;
    case Kind::kString:
      AppendBulk(reply.text, out);
      return;
    case Kind::kInteger:
      absl::StrAppend(out, ":", reply.integer, "\r\n");
      return;
    case Kind::kArray:
      absl::StrAppend(out, "*", reply.elements.size(), "\r\n");
      for (const kvsh::Reply& e : reply.elements) AppendReply(e, out);
      return;
    case Kind::kText: {
      std::string text;
      for (char c : reply.text) {
        if (c == '\n' && (text.empty() || text.back() != '\r')) text.push_back('\r');
        text.push_back(c);
      }
      AppendBulk(text, out);
      return;
    }
  }
}

std::string ErrorLine(absl::string_view message) {
  std::string out;
  AppendLine('-', message, &out);
  return out;
}

}  // namespace resp
}  // namespace farm
