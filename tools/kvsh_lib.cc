#include "tools/kvsh_lib.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace farm {
namespace kvsh {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct Spec {
  Op op;
  const char* name;
  std::vector<const char*> aliases;
  int min_args;
  int max_args;  // -1: any number
  const char* usage;
  const char* summary;
  const char* details;
};

// A table, one command per entry: kept as written.
// clang-format off
const std::vector<Spec>& Specs() {
  static const std::vector<Spec>* specs = new std::vector<Spec>{
      {Op::kGet, "get", {}, 1, 1, "get KEY", "the value of KEY, or (nil) if there is none",
       "Prints the value of KEY in quotes (bytes that are not printable as \\xHH), or (nil) when\n"
       "the key does not exist (not an error). One one-sided READ of the key's neighbourhood.\n"},
      {Op::kPut, "put", {"set"}, 2, -1, "put KEY VALUE [NX|XX] [GET]",
       "set KEY to VALUE (alias: set); NX: only if absent, XX: only if present",
       "Sets KEY to VALUE, inserting or replacing it, and prints OK. A transaction.\n"
       "Quote a value with spaces: put greeting \"hello world\".\n"
       "Options, as Redis's SET (case-insensitive, in any order):\n"
       "  NX   set it only if KEY does not exist; prints OK, or (nil) if it existed\n"
       "  XX   set it only if KEY exists; prints OK, or (nil) if it did not\n"
       "  GET  print the old value instead of OK ((nil) if there was none), whether or not\n"
       "       NX or XX let the value be set\n"
       "With options, the read of the old value and the write are one transaction (kv::Client\n"
       "PutIfAbsent, PutIfPresent, GetAndSet; NX or XX with GET: Get and Put in one Txn):\n"
       "nobody changes KEY between them. Keys do not expire: EX, PX, EXAT, PXAT and KEEPTTL\n"
       "are refused.\n"},
      {Op::kDel, "del", {"delete"}, 1, -1, "del KEY [KEY ...]",
       "delete keys, all in one transaction; prints how many existed (alias: delete)",
       "Deletes every KEY in one transaction (all of them or, on an error, none) and prints\n"
       "(integer) N, the number of keys that existed.\n"},
      {Op::kCas, "cas", {}, 3, 3, "cas KEY EXPECTED NEW",
       "set KEY to NEW if its value is EXPECTED ((nil): if absent)",
       "Sets KEY to NEW only if its current value is EXPECTED, atomically, and prints\n"
       "(integer) 1 if it did, (integer) 0 if not. An unquoted (nil) as EXPECTED means \"only if\n"
       "KEY does not exist\" (what get prints for a missing key); \"(nil)\" in quotes is the\n"
       "5-byte string. Examples:\n"
       "  cas lock (nil) me        take the lock if nobody holds it\n"
       "  cas counter 41 42        increment 41 to 42 unless someone else changed it\n"},
      {Op::kMget, "mget", {}, 1, -1, "mget KEY [KEY ...]",
       "the values of several keys, read together",
       "Prints a numbered list with the value of each KEY, or (nil) for a missing one. The keys\n"
       "are read together (kv::Client::MultiGet: one-sided READs, or batched GETs by RPC on\n"
       "tcp), each at some moment during the command: not one snapshot of all of them.\n"},
      {Op::kIncrBy, "incr", {}, 1, 1, "incr KEY", "add 1 to the integer in KEY; prints the result",
       "Adds 1 to the value of KEY read as a decimal integer (a missing key counts as 0), stores\n"
       "the sum and prints it as (integer) N. One transaction: concurrent increments are never\n"
       "lost. A value that is not an integer (as Redis writes one: no '+', leading zeros or\n"
       "spaces) or a sum outside 64 bits is refused, as Redis refuses it, and nothing changes.\n"},
      {Op::kIncrBy, "incrby", {}, 2, 2, "incrby KEY INCREMENT",
       "add INCREMENT to the integer in KEY; prints the result",
       "As incr, adding INCREMENT (a 64-bit integer, possibly negative) instead of 1.\n"},
      {Op::kIncrBy, "decr", {}, 1, 1, "decr KEY", "subtract 1 from the integer in KEY",
       "As incr, subtracting 1.\n"},
      {Op::kIncrBy, "decrby", {}, 2, 2, "decrby KEY DECREMENT",
       "subtract DECREMENT from the integer in KEY",
       "As incr, subtracting DECREMENT (a 64-bit integer) instead of adding 1.\n"},
      {Op::kSetNx, "setnx", {}, 2, 2, "setnx KEY VALUE", "set KEY to VALUE if absent; 1 if it did",
       "Sets KEY to VALUE only if KEY does not exist, atomically, and prints (integer) 1 if it\n"
       "did, (integer) 0 if KEY existed (as Redis's SETNX; put KEY VALUE NX answers OK/(nil)).\n"},
      {Op::kGetSet, "getset", {}, 2, 2, "getset KEY VALUE", "set KEY to VALUE; prints the old value",
       "Sets KEY to VALUE and prints the value it replaced, or (nil) if KEY did not exist: one\n"
       "transaction (as Redis's GETSET, or put KEY VALUE GET).\n"},
      {Op::kAppend, "append", {}, 2, 2, "append KEY VALUE",
       "append VALUE to KEY's value; prints the new length",
       "Appends VALUE to the value of KEY (a missing key is set to VALUE) and prints the new\n"
       "length as (integer) N. One transaction, which rewrites the whole value. A result over\n"
       "the value limit is refused and nothing changes.\n"},
      {Op::kStrlen, "strlen", {}, 1, 1, "strlen KEY", "the length of KEY's value (0 if absent)",
       "Prints the length in bytes of the value of KEY as (integer) N, 0 for a missing key.\n"
       "It reads the value (a get).\n"},
      {Op::kExists, "exists", {}, 1, -1, "exists KEY [KEY ...]", "how many of the keys exist",
       "Prints (integer) N, the number of the KEYs that exist; a key named twice counts twice\n"
       "(as Redis's EXISTS). Each key is looked up on its own (no value is copied), at some\n"
       "moment during the command: not one snapshot of all of them.\n"},
      {Op::kScan, "scan", {}, 1, 5, "scan CURSOR [MATCH PATTERN] [COUNT N]",
       "one step of an iteration over the keys; prints the next cursor and keys",
       "Prints two elements: the cursor to pass to the next scan (0: the iteration is over) and\n"
       "this step's keys. Start with cursor 0. As Redis's SCAN: a key present from the first\n"
       "step to the last is returned (here exactly once); one added or deleted meanwhile may or\n"
       "may not be. MATCH keeps the keys matching PATTERN, a glob as Redis's (*, ?, [abc],\n"
       "[^a-z], \\ escapes); COUNT N (default 10) is how many home buckets of one shard the\n"
       "step reads: a hint of the work, not of the keys, so a step may return none with a\n"
       "cursor that is not 0. A cursor no step returned is refused: ERR invalid cursor.\n"},
      {Op::kKeys, "keys", {}, 1, 1, "keys PATTERN", "every key matching PATTERN (walks all keys)",
       "Prints every key matching PATTERN (a glob as scan's MATCH; * for every key). As Redis's\n"
       "KEYS it walks the whole store (a full scan iteration): slow on a large store. Keys\n"
       "written meanwhile may or may not be listed (scan's guarantee).\n"},
      {Op::kDbSize, "dbsize", {}, 0, 0, "dbsize", "the number of keys in the store",
       "Prints (integer) N: the sum of the shards' counts, read shard after shard, so under\n"
       "concurrent writes not a count at one moment (kv::Client::Size).\n"},
      {Op::kMset, "mset", {}, 2, -1, "mset KEY VALUE [KEY VALUE ...]",
       "set several keys, all in one transaction",
       "Sets each KEY to its VALUE in one transaction (kv::Client::MultiPut): all of them or,\n"
       "on an error, none. Prints OK.\n"},
      {Op::kMsetNx, "msetnx", {}, 2, -1, "msetnx KEY VALUE [KEY VALUE ...]",
       "set several keys only if none exists; 1 if it did",
       "Sets every KEY to its VALUE only if none of the KEYs exists, and prints (integer) 1;\n"
       "if any exists it sets nothing and prints (integer) 0. One transaction: the checks and\n"
       "the writes.\n"},
      {Op::kInfo, "info", {}, 0, 1, "info [SECTION]", "the store's statistics, as Redis's INFO",
       "Prints sections of name:value lines, as Redis's INFO:\n"
       "  # Keyspace  db0:keys=N,shards=S,memory_bytes=B (the sum of the shards' counts)\n"
       "  # Shards    one line per shard: shardI:node=..,buckets=..,bucket_bytes=..,items=..,\n"
       "              inline=..,displaced=..,overflow_blocks=..,out_of_line_bytes=..,\n"
       "              memory_bytes=..\n"
       "SECTION (case-insensitive): keyspace, shards, or all (the default). Any other section\n"
       "prints nothing, as Redis does. See also stats (a table).\n"},
      {Op::kPing, "ping", {}, 0, 1, "ping [MESSAGE]", "PONG, or MESSAGE (is the store there?)",
       "Prints PONG, or MESSAGE when one is given (as Redis's PING). It answers without\n"
       "asking the store: it says the shell is running and still a member of the cluster.\n"},
      {Op::kStats, "stats", {}, 0, 0, "stats", "per shard: items, buckets, memory",
       "Prints one line per shard node: items stored (inline in their bucket, displaced from\n"
       "their home bucket), overflow blocks, buckets, memory used and memory per item, and the\n"
       "total. With --raw: tab-separated, with a header line.\n"},
      {Op::kHelp, "help", {}, 0, 1, "help [COMMAND]", "this list, or one command's details", ""},
      {Op::kQuit, "quit", {"exit"}, 0, 0, "quit", "leave the shell (also: exit, Ctrl-D)",
       "Leaves the shell. With --local, also stops the cluster it started.\n"},
  };
  return *specs;
}
// clang-format on

const Spec* FindSpec(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const Spec& s : Specs()) {
    if (lower == s.name) return &s;
    for (const char* a : s.aliases) {
      if (lower == a) return &s;
    }
  }
  return nullptr;
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string CommandList() { return absl::StrJoin(CommandNames(), ", "); }

std::string UnknownCommand(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  std::string best;
  size_t best_distance = 3;  // suggest only close names
  for (const Spec& s : Specs()) {
    std::vector<const char*> names = {s.name};
    names.insert(names.end(), s.aliases.begin(), s.aliases.end());
    for (const char* n : names) {
      const size_t d = EditDistance(lower, n);
      if (d < best_distance) {
        best_distance = d;
        best = s.name;
      }
    }
  }
  // Show the name as typed, but never raw control bytes.
  std::string shown = Quote(name);
  shown = shown.substr(1, shown.size() - 2);
  return absl::StrCat("unknown command '", shown, "'",
                      best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)"),
                      "; commands: ", CommandList(), "; 'help' explains them");
}

absl::Status CheckKey(absl::string_view key, const Limits& limits) {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty key: keys are 1 to ", limits.max_key_size, " bytes"));
  }
  if (key.size() > limits.max_key_size) {
    return absl::InvalidArgumentError(absl::StrCat("key too long: ", key.size(),
                                                   " bytes; keys are 1 to ", limits.max_key_size,
                                                   " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckValue(absl::string_view value, const Limits& limits) {
  if (value.size() > limits.max_value_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value too large: ", value.size(), " bytes; the limit is ", limits.max_value_size,
        " bytes (", HumanBytes(limits.max_value_size), ")"));
  }
  return absl::OkStatus();
}

// put's options after KEY VALUE (Redis's SET: NX|XX, GET), moved from c->args into flags.
absl::Status ParseSetOptions(Command* c) {
  for (size_t i = 2; i < c->args.size(); ++i) {
    const std::string option = absl::AsciiStrToUpper(c->args[i]);
    if (option == "NX" || option == "XX") {
      bool& mine = option == "NX" ? c->if_absent : c->if_present;
      const bool other = option == "NX" ? c->if_present : c->if_absent;
      if (mine || other) {
        return absl::InvalidArgumentError(
            "syntax error: put takes one of NX and XX, once (usage: put KEY VALUE [NX|XX] [GET])");
      }
      mine = true;
    } else if (option == "GET") {
      if (c->get_old) {
        return absl::InvalidArgumentError(
            "syntax error: GET given twice (usage: put KEY VALUE [NX|XX] [GET])");
      }
      c->get_old = true;
    } else if (option == "EX" || option == "PX" || option == "EXAT" || option == "PXAT" ||
               option == "KEEPTTL") {
      return absl::InvalidArgumentError(absl::StrCat(
          "syntax error: ", option, " is not supported: keys do not expire in this store"));
    } else {
      const std::string shown = Quote(c->args[i]);
      return absl::InvalidArgumentError(
          absl::StrCat("syntax error: ", shown,
                       " is not an option of put (NX, XX, GET); quote a value with spaces: put "
                       "KEY \"two words\""));
    }
  }
  c->args.resize(2);
  return absl::OkStatus();
}

// An integer argument as Redis reads one (string2ll): an optional '-', then digits without a
// leading zero ("0" alone), within int64.
absl::StatusOr<int64_t> ParseInteger(absl::string_view text) {
  const absl::Status bad = absl::InvalidArgumentError("value is not an integer or out of range");
  absl::string_view digits = text;
  const bool negative = absl::ConsumePrefix(&digits, "-");
  if (digits.empty() || digits.size() > 19 ||
      (digits[0] == '0' && (negative || digits.size() > 1))) {
    return bad;
  }
  uint64_t magnitude = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return bad;
    magnitude = magnitude * 10 + static_cast<uint64_t>(c - '0');  // 19 digits fit in uint64
  }
  const uint64_t limit =
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
  if (magnitude > limit) return bad;
  if (negative) return static_cast<int64_t>(0 - magnitude);  // two's complement: -2^63 too
  return static_cast<int64_t>(magnitude);
}

// scan CURSOR [MATCH PATTERN] [COUNT N], Redis's words for errors.
absl::Status ParseScan(Command* c) {
  // A cursor is an unsigned 64-bit decimal; Redis refuses anything else the same way.
  const absl::Status bad_cursor = absl::InvalidArgumentError("invalid cursor");
  const std::string& cursor = c->args[0];
  if (cursor.empty() || cursor.size() > 20) return bad_cursor;
  uint64_t value = 0;
  for (const char ch : cursor) {
    if (ch < '0' || ch > '9') return bad_cursor;
    const uint64_t digit = static_cast<uint64_t>(ch - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return bad_cursor;
    value = value * 10 + digit;
  }
  c->cursor = value;
  for (size_t i = 1; i < c->args.size(); i += 2) {
    const std::string option = absl::AsciiStrToUpper(c->args[i]);
    if (i + 1 >= c->args.size() || (option != "MATCH" && option != "COUNT")) {
      return absl::InvalidArgumentError(
          "syntax error (usage: scan CURSOR [MATCH PATTERN] [COUNT N])");
    }
    if (option == "MATCH") {
      c->pattern = c->args[i + 1];
      continue;
    }
    absl::StatusOr<int64_t> n = ParseInteger(c->args[i + 1]);
    if (!n.ok()) return n.status();
    if (*n < 1) return absl::InvalidArgumentError("syntax error: COUNT must be at least 1");
    c->count = static_cast<uint64_t>(*n);
  }
  c->args.resize(1);
  return absl::OkStatus();
}

// mset and msetnx: KEY VALUE pairs.
absl::Status CheckPairs(const Command& c, const Limits& limits) {
  if (c.args.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("wrong number of arguments for '", c.name, "' command"));  // Redis's words
  }
  absl::Status s;
  for (size_t i = 0; i < c.args.size(); i += 2) {
    if (s = CheckKey(c.args[i], limits); !s.ok()) return s;
    if (s = CheckValue(c.args[i + 1], limits); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// incr, incrby, decr, decrby: the delta to add.
absl::Status ParseDelta(Command* c) {
  const bool decrement = c->name == "decr" || c->name == "decrby";
  int64_t by = 1;
  if (c->args.size() == 2) {
    absl::StatusOr<int64_t> n = ParseInteger(c->args[1]);
    if (!n.ok()) return n.status();
    by = *n;
    c->args.resize(1);
  }
  if (decrement && by == std::numeric_limits<int64_t>::min()) {
    return absl::InvalidArgumentError("decrement would overflow");  // Redis 7's words
  }
  c->delta = decrement ? -by : by;
  return absl::OkStatus();
}

}  // namespace

std::vector<Token> WordTokens(absl::Span<const std::string> words) {
  std::vector<Token> tokens;
  for (const std::string& w : words) tokens.push_back(Token{w, false});
  return tokens;
}

absl::Status ReadQuoted(absl::string_view line, size_t* pos, bool strict_hex, std::string* out) {
  const size_t n = line.size();
  const size_t start = *pos;
  const char q = line[start];
  size_t i = start + 1;
  while (i < n) {
    const char c = line[i];
    if (c == q) {
      *pos = i + 1;
      return absl::OkStatus();
    }
    if (c == '\\' && i + 1 < n) {
      const char e = line[i + 1];
      if (q == '\'') {
        // In single quotes only \' is an escape.
        if (e == '\'') {
          out->push_back('\'');
          i += 2;
        } else {
          out->push_back('\\');
          ++i;
        }
        continue;
      }
      switch (e) {
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'a':
          out->push_back('\a');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'x': {
          const int hi = i + 2 < n ? HexDigit(line[i + 2]) : -1;
          const int lo = i + 3 < n ? HexDigit(line[i + 3]) : -1;
          if (hi >= 0 && lo >= 0) {
            out->push_back(static_cast<char>(hi * 16 + lo));
            i += 4;
            continue;
          }
          if (strict_hex) {
            return absl::InvalidArgumentError(absl::StrCat(
                "bad escape at column ", i + 1, ": \\x takes two hex digits, e.g. \\x00"));
          }
          out->push_back('x');  // Redis's reading
          break;
        }
        default:
          out->push_back(e);
          break;  // \" \\ and any other \c: c
      }
      i += 2;
      continue;
    }
    out->push_back(c);
    ++i;
  }
  return absl::InvalidArgumentError(absl::StrCat("unbalanced quotes: the ",
                                                 q == '"' ? "double" : "single",
                                                 " quote at column ", start + 1, " is not closed"));
}

absl::StatusOr<std::vector<std::vector<Token>>> SplitLine(absl::string_view line) {
  std::vector<std::vector<Token>> commands;
  std::vector<Token> current;
  auto end_command = [&] {
    if (!current.empty()) commands.push_back(std::move(current));
    current.clear();
  };
  size_t i = 0;
  const size_t n = line.size();
  // A comment: the whole line.
  while (i < n && IsSpace(line[i])) ++i;
  if (i < n && line[i] == '#') return commands;
  while (i < n) {
    while (i < n && IsSpace(line[i])) ++i;
    if (i >= n) break;
    if (line[i] == ';') {
      end_command();
      ++i;
      continue;
    }
    Token t;
    const char q = line[i];
    if (q == '"' || q == '\'') {
      t.quoted = true;
      if (absl::Status s = ReadQuoted(line, &i, /*strict_hex=*/true, &t.text); !s.ok()) return s;
      if (i < n && !IsSpace(line[i]) && line[i] != ';') {
        return absl::InvalidArgumentError(
            absl::StrCat("a closing quote must be followed by a space, ';' or the end of the "
                         "line (column ",
                         i + 1, ")"));
      }
    } else {
      while (i < n && !IsSpace(line[i]) && line[i] != ';') t.text.push_back(line[i++]);
    }
    current.push_back(std::move(t));
  }
  end_command();
  return commands;
}

std::string Quote(absl::string_view bytes) {
  std::string out = "\"";
  for (const char ch : bytes) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\a': out += "\\a"; break;
      case '\b': out += "\\b"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out.push_back(static_cast<char>(c));
        } else {
          absl::StrAppendFormat(&out, "\\x%02x", c);
        }
    }
  }
  out += "\"";
  return out;
}

std::vector<std::string> CommandNames() {
  std::vector<std::string> names;
  for (const Spec& s : Specs()) names.push_back(s.name);
  return names;
}

std::vector<std::string> CompleteCommandName(absl::string_view prefix) {
  const std::string lower = absl::AsciiStrToLower(prefix);
  const bool upper =
      !prefix.empty() && absl::AsciiStrToUpper(prefix) == prefix && lower != std::string(prefix);
  std::vector<std::string> names;
  for (const Spec& s : Specs()) {
    std::vector<const char*> all = {s.name};
    all.insert(all.end(), s.aliases.begin(), s.aliases.end());
    for (const char* n : all) {
      if (absl::StartsWith(n, lower)) names.push_back(upper ? absl::AsciiStrToUpper(n) : n);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// A usage's arguments ("KEY [KEY ...]" of "del KEY [KEY ...]"), split at the spaces outside
// brackets: "KEY", "[KEY ...]".
std::vector<std::string> UsageArguments(const Spec& spec) {
  absl::string_view rest = spec.usage;
  absl::ConsumePrefix(&rest, spec.name);
  std::vector<std::string> out;
  int depth = 0;
  std::string current;
  for (const char c : rest) {
    if (c == ' ' && depth == 0) {
      if (!current.empty()) out.push_back(std::move(current));
      current.clear();
      continue;
    }
    if (c == '[') ++depth;
    if (c == ']') --depth;
    current.push_back(c);
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

}  // namespace

std::string ArgumentHint(absl::string_view line) {
  const absl::string_view trimmed = absl::StripTrailingAsciiWhitespace(line);
  if (trimmed.empty() || trimmed.back() == ';') return "";
  absl::StatusOr<std::vector<std::vector<Token>>> commands = SplitLine(line);
  if (!commands.ok() || commands->empty()) return "";
  const std::vector<Token>& tokens = commands->back();
  const Spec* spec = FindSpec(tokens[0].text);
  if (spec == nullptr) return "";
  std::vector<std::string> arguments = UsageArguments(*spec);
  // As redis-cli: each argument typed takes off a required one, up to the first optional one.
  size_t typed = tokens.size() - 1;
  size_t first = 0;
  while (typed > 0 && first < arguments.size() && arguments[first][0] != '[') {
    ++first;
    --typed;
  }
  arguments.erase(arguments.begin(), arguments.begin() + first);
  if (arguments.empty()) return "";
  const bool after_space = line.size() > trimmed.size();
  return absl::StrCat(after_space ? "" : " ", absl::StrJoin(arguments, " "));
}

absl::StatusOr<Command> ParseCommand(absl::Span<const Token> tokens, const Limits& limits) {
  if (tokens.empty()) return absl::InvalidArgumentError("empty command");
  const Spec* spec = FindSpec(tokens[0].text);
  if (spec == nullptr) return absl::InvalidArgumentError(UnknownCommand(tokens[0].text));
  Command c;
  c.op = spec->op;
  c.name = spec->name;
  const int args = static_cast<int>(tokens.size()) - 1;
  if (args < spec->min_args || (spec->max_args >= 0 && args > spec->max_args)) {
    std::string hint;
    if (spec->op == Op::kCas && args < 3) {
      hint = "; EXPECTED (nil) means the key must be absent";
    }
    return absl::InvalidArgumentError(absl::StrCat("wrong number of arguments for '", spec->name,
                                                   "' (usage: ", spec->usage, hint, ")"));
  }
  for (size_t i = 1; i < tokens.size(); ++i) c.args.push_back(tokens[i].text);
  absl::Status s;
  switch (c.op) {
    case Op::kGet:
    case Op::kDel:
    case Op::kMget:
    case Op::kStrlen:
    case Op::kExists:
      for (const std::string& k : c.args) {
        if (s = CheckKey(k, limits); !s.ok()) return s;
      }
      break;
    case Op::kPut:
      if (s = CheckKey(c.args[0], limits); !s.ok()) return s;
      if (s = CheckValue(c.args[1], limits); !s.ok()) return s;
      if (s = ParseSetOptions(&c); !s.ok()) return s;
      break;
    case Op::kSetNx:
    case Op::kGetSet:
    case Op::kAppend:
      if (s = CheckKey(c.args[0], limits); !s.ok()) return s;
      if (s = CheckValue(c.args[1], limits); !s.ok()) return s;
      break;
    case Op::kIncrBy:
      if (s = CheckKey(c.args[0], limits); !s.ok()) return s;
      if (s = ParseDelta(&c); !s.ok()) return s;
      break;
    case Op::kCas:
      if (s = CheckKey(c.args[0], limits); !s.ok()) return s;
      if (!tokens[2].quoted && tokens[2].text == "(nil)") {
        c.expect_absent = true;
        c.args[1].clear();
      }
      if (s = CheckValue(c.args[2], limits); !s.ok()) return s;
      break;
    case Op::kScan:
      if (s = ParseScan(&c); !s.ok()) return s;
      break;
    case Op::kKeys:
      c.pattern = c.args[0];
      break;
    case Op::kMset:
    case Op::kMsetNx:
      if (s = CheckPairs(c, limits); !s.ok()) return s;
      break;
    case Op::kHelp:
      if (!c.args.empty() && FindSpec(c.args[0]) == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("no command '", c.args[0], "'; commands: ", CommandList()));
      }
      break;
    case Op::kPing:
    case Op::kStats:
    case Op::kDbSize:
    case Op::kInfo:
    case Op::kQuit:
      break;
  }
  return c;
}

absl::StatusOr<std::string> HelpText(absl::string_view command, const Limits& limits) {
  if (!command.empty()) {
    const Spec* spec = FindSpec(command);
    if (spec == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("no command '", command, "'; commands: ", CommandList()));
    }
    if (spec->op == Op::kHelp) return HelpText("", limits);
    std::string out = absl::StrCat("usage: ", spec->usage, "\n", spec->details);
    if (spec->op != Op::kPing && spec->op != Op::kStats && spec->op != Op::kQuit &&
        spec->op != Op::kDbSize && spec->op != Op::kInfo && spec->op != Op::kScan &&
        spec->op != Op::kKeys) {
      absl::StrAppend(&out, "Keys are 1 to ", limits.max_key_size, " bytes, values 0 to ",
                      limits.max_value_size, " bytes.\n");
    }
    return out;
  }
  std::string out = "Commands (names are case-insensitive; ';' separates commands on a line):\n";
  for (const Spec& s : Specs()) absl::StrAppendFormat(&out, "  %-28s %s\n", s.usage, s.summary);
  absl::StrAppend(
      &out,
      "Arguments are words, \"double quoted\" (escapes \\\" \\\\ \\n \\r \\t \\xHH) or 'single "
      "quoted'.\n",
      "Keys are 1 to ", limits.max_key_size, " bytes, values 0 to ", limits.max_value_size,
      " bytes (", HumanBytes(limits.max_value_size), ").\n",
      "'help COMMAND' says more about one command.\n");
  return out;
}

Reply Reply::Status(std::string s) {
  Reply r;
  r.kind = Kind::kStatus;
  r.text = std::move(s);
  return r;
}
Reply Reply::Error(std::string message) {
  Reply r;
  r.kind = Kind::kError;
  r.text = std::move(message);
  return r;
}
Reply Reply::Nil() { return Reply(); }
Reply Reply::String(std::string bytes) {
  Reply r;
  r.kind = Kind::kString;
  r.text = std::move(bytes);
  return r;
}
Reply Reply::Integer(int64_t i) {
  Reply r;
  r.kind = Kind::kInteger;
  r.integer = i;
  return r;
}
Reply Reply::Array(std::vector<Reply> elements) {
  Reply r;
  r.kind = Kind::kArray;
  r.elements = std::move(elements);
  return r;
}
Reply Reply::Text(std::string text) {
  Reply r;
  r.kind = Kind::kText;
  r.text = std::move(text);
  return r;
}

bool Reply::failed() const {
  if (kind == Kind::kError) return true;
  for (const Reply& e : elements) {
    if (e.failed()) return true;
  }
  return false;
}

namespace {

// One reply without its final newline.
std::string FormatBody(const Reply& r, bool raw) {
  switch (r.kind) {
    case Reply::Kind::kStatus: return r.text;
    case Reply::Kind::kError: return raw ? r.text : absl::StrCat("(error) ", r.text);
    // (nil) with --raw too, unlike redis-cli --raw, so that it differs from an empty value.
    case Reply::Kind::kNil:
      return "(nil)";
    case Reply::Kind::kString: return raw ? r.text : Quote(r.text);
    case Reply::Kind::kInteger:
      return raw ? absl::StrCat(r.integer) : absl::StrCat("(integer) ", r.integer);
    case Reply::Kind::kText: {
      std::string t = r.text;
      if (!t.empty() && t.back() == '\n') t.pop_back();
      return t;
    }
    case Reply::Kind::kArray: {
      if (r.elements.empty()) return raw ? "" : "(empty array)";
      std::string out;
      const int width = static_cast<int>(absl::StrCat(r.elements.size()).size());
      for (size_t i = 0; i < r.elements.size(); ++i) {
        if (i > 0) out += "\n";
        if (raw) {
          out += FormatBody(r.elements[i], raw);
          continue;
        }
        absl::StrAppendFormat(&out, "%*d) ", width, static_cast<int>(i + 1));
        // A nested array's later lines line up under its first, as redis-cli prints them.
        out += absl::StrReplaceAll(FormatBody(r.elements[i], raw),
                                   {{"\n", "\n" + std::string(width + 2, ' ')}});
      }
      return out;
    }
  }
  return "";
}

}  // namespace

std::string Format(const Reply& reply, bool raw) { return FormatBody(reply, raw) + "\n"; }

Reply ErrorReply(const absl::Status& status) {
  if (absl::IsInvalidArgument(status)) return Reply::Error(absl::StrCat("ERR ", status.message()));
  if (absl::IsFailedPrecondition(status)) {
    absl::string_view message = status.message();
    absl::ConsumePrefix(&message, "kv: ");
    return Reply::Error(absl::StrCat("ERR ", message));
  }
  return Reply::Error(
      absl::StrCat(absl::StatusCodeToString(status.code()), " ", status.message()));
}

Reply ScanReply(uint64_t cursor, std::vector<std::string> keys) {
  std::vector<Reply> elements;
  for (std::string& k : keys) elements.push_back(Reply::String(std::move(k)));
  return Reply::Array({Reply::String(absl::StrCat(cursor)), Reply::Array(std::move(elements))});
}

std::string FormatInfo(absl::Span<const StatsRow> rows, absl::string_view section) {
  const std::string s = absl::AsciiStrToLower(section);
  const bool all = s.empty() || s == "all" || s == "default" || s == "everything";
  std::string out;
  if (all || s == "keyspace") {
    uint64_t keys = 0;
    uint64_t memory = 0;
    for (const StatsRow& r : rows) {
      keys += r.items;
      memory += r.memory_bytes;
    }
    absl::StrAppend(&out, "# Keyspace\ndb0:keys=", keys, ",shards=", rows.size(),
                    ",memory_bytes=", memory, "\n");
  }
  if (all || s == "shards") {
    if (!out.empty()) out += "\n";
    out += "# Shards\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const StatsRow& r = rows[i];
      absl::StrAppend(
          &out, "shard", i, ":node=", r.node, ",buckets=", r.buckets,
          ",bucket_bytes=", r.bucket_bytes, ",items=", r.items, ",inline=", r.inline_items,
          ",displaced=", r.displaced_items, ",overflow_blocks=", r.overflow_blocks,
          ",out_of_line_bytes=", r.out_of_line_bytes, ",memory_bytes=", r.memory_bytes, "\n");
    }
  }
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

std::string FormatStats(absl::Span<const StatsRow> rows, bool raw) {
  std::string out;
  if (raw) {
    out =
        "node\titems\tinline_items\tdisplaced_items\toverflow_blocks\tbuckets\tbucket_bytes\t"
        "out_of_line_bytes\tmemory_bytes\n";
    for (const StatsRow& r : rows) {
      absl::StrAppend(&out, r.node, "\t", r.items, "\t", r.inline_items, "\t", r.displaced_items,
                      "\t", r.overflow_blocks, "\t", r.buckets, "\t", r.bucket_bytes, "\t",
                      r.out_of_line_bytes, "\t", r.memory_bytes, "\n");
    }
    return out;
  }
  if (rows.empty()) return "(no shards)\n";
  const char* kRow = "%-6s %10s %10s %10s %9s %14s %11s %10s\n";
  absl::StrAppendFormat(&out, kRow, "node", "items", "inline", "displaced", "overflow", "buckets",
                        "memory", "per item");
  auto per_item = [](uint64_t memory, uint64_t items) {
    return items == 0 ? std::string("-") : HumanBytes(memory / items);
  };
  StatsRow total;
  for (const StatsRow& r : rows) {
    absl::StrAppendFormat(&out, kRow, absl::StrCat(r.node), absl::StrCat(r.items),
                          absl::StrCat(r.inline_items), absl::StrCat(r.displaced_items),
                          absl::StrCat(r.overflow_blocks),
                          absl::StrCat(r.buckets, " x ", r.bucket_bytes, " B"),
                          HumanBytes(r.memory_bytes), per_item(r.memory_bytes, r.items));
    total.items += r.items;
    total.inline_items += r.inline_items;
    total.displaced_items += r.displaced_items;
    total.overflow_blocks += r.overflow_blocks;
    total.buckets += r.buckets;
    total.memory_bytes += r.memory_bytes;
  }
  absl::StrAppendFormat(&out, kRow, "total", absl::StrCat(total.items),
                        absl::StrCat(total.inline_items), absl::StrCat(total.displaced_items),
                        absl::StrCat(total.overflow_blocks), absl::StrCat(total.buckets),
                        HumanBytes(total.memory_bytes),
                        per_item(total.memory_bytes, total.items));
  absl::StrAppend(&out, rows.size(), rows.size() == 1 ? " shard" : " shards", ", ", total.items,
                  total.items == 1 ? " item" : " items", ", ", HumanBytes(total.memory_bytes),
                  "\n");
  return out;
}

}  // namespace kvsh
}  // namespace farm
