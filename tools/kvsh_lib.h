// The parts of //tools:kvsh (the key-value shell) that do not touch a cluster: splitting a line
// into commands and arguments with redis-cli's quoting, checking a command's arguments, the
// replies and how they are printed, the help text, and the interactive shell's TAB completion
// and argument hints (from the help's table of usages). kvsh.cc runs the commands.
//
// Quoting (as redis-cli): an argument is a word without spaces, "double quoted" (escapes \" \\ \n
// \r \t \a \b and \xHH; any other \c is c) or 'single quoted' (only \' is an escape). A
// closing quote must be followed by a space, a ';' or the end of the line. A quote inside a word
// is an ordinary character (it's). An unquoted ';' ends a command, so one line can hold several
// (put a 1; get a). A line whose first non-blank character is '#' is a comment.
//
// Replies print as redis-cli prints them: "value" (quoted, binary bytes as \xHH), (nil),
// (integer) 1, OK, (error) ERR ..., numbered arrays; --raw prints bare values instead, as
// redis-cli --raw does, except that a missing key prints (nil) there too: redis-cli --raw prints
// an empty line for both a missing key and an empty value, which a script cannot tell apart.
#ifndef FARM_TOOLS_KVSH_LIB_H_
#define FARM_TOOLS_KVSH_LIB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "farm/kv/shard_stats.h"

namespace farm {
namespace kvsh {

struct Token {
  std::string text;
  bool quoted = false;  // written in quotes ("(nil)" is a value, (nil) means "absent")
};

// The commands of one line: each a list of arguments, the command name first. Empty commands
// (blank lines, comments, ";;") are left out. InvalidArgument for unbalanced quotes, a bad \x
// escape, or a closing quote followed by something other than a space.
absl::StatusOr<std::vector<std::vector<Token>>> SplitLine(absl::string_view line);

// Reads the quoted string that starts at line[*pos] (a " or a ') as redis-cli and redis-server
// read one (sdssplitargs): in double quotes \n \r \t \a \b, \xHH, and \c for any other c; in
// single quotes only \'. Appends its bytes to `out` and moves *pos past the closing quote.
// InvalidArgument if it does not close; with `strict_hex` (kvsh) also for a \x without two hex
// digits, which Redis reads as an x. SplitLine's quoted tokens, and the RESP gateway's inline
// requests (tools/resp.cc).
absl::Status ReadQuoted(absl::string_view line, size_t* pos, bool strict_hex, std::string* out);

// `bytes` as redis-cli shows a string: in double quotes, printable ASCII as is, \" \\ \n \r \t
// \a \b escaped, every other byte as \xHH. SplitLine reads it back as the same bytes.
std::string Quote(absl::string_view bytes);

enum class Op {
  kGet,
  kPut,
  kDel,
  kCas,
  kMget,
  kIncrBy,  // incr, incrby, decr, decrby: Command::delta says by how much
  kSetNx,
  kGetSet,
  kAppend,
  kStrlen,
  kExists,
  kScan,
  kKeys,
  kDbSize,
  kMset,
  kMsetNx,
  kInfo,
  kPing,
  kStats,
  kHelp,
  kQuit
};

// A command whose arguments have been checked.
struct Command {
  Op op = Op::kHelp;
  std::string name;               // as canonically spelled: "get", "put", ...
  std::vector<std::string> args;  // the arguments after the name
  // cas only: the expected value is (nil), i.e. the key must be absent (args[1] is then empty).
  bool expect_absent = false;
  // put only, Redis's SET options (args holds KEY and VALUE alone): NX set only if absent, XX
  // only if present (never both), GET reply with the old value instead of OK.
  bool if_absent = false;
  bool if_present = false;
  bool get_old = false;
  // incr (1), incrby N (N), decr (-1), decrby N (-N): what kv::Client::IncrBy adds.
  int64_t delta = 0;
  // scan only: the cursor (decimal, as Redis prints it), MATCH's pattern (empty: every key) and
  // COUNT's hint (10 as in Redis). keys: args[0] is the pattern.
  uint64_t cursor = 0;
  std::string pattern;
  uint64_t count = 10;
};

struct Limits {
  uint64_t max_key_size = 1024;
  uint64_t max_value_size = 1 << 20;
};

// Checks a command (name case-insensitive; aliases: set = put, delete = del, exit = quit) and its
// arguments: count, key sizes (1 .. max_key_size bytes), value sizes, put's options, incrby's and
// decrby's increment (an integer as Redis reads one, else "value is not an integer or out of
// range", Redis's words; decrby of -2^63 "decrement would overflow").
// InvalidArgument with a message that says what is wrong and how to write it (usage, nearest
// command name).
absl::StatusOr<Command> ParseCommand(absl::Span<const Token> tokens, const Limits& limits);

// A command given as words (kvsh's positional arguments, as redis-cli takes them): each word is
// one argument as it is, with no quoting, escapes or ';' (the calling shell has done its quoting).
// A word (nil) counts as unquoted, so `kvsh cas k '(nil)' v` means "only if k is absent".
std::vector<Token> WordTokens(absl::Span<const std::string> words);

// The help text: every command when `command` is empty, else that command's usage and details.
// NotFound (with the list of commands) for an unknown command.
absl::StatusOr<std::string> HelpText(absl::string_view command, const Limits& limits);

// The names of the commands (canonical spellings, as help lists them).
std::vector<std::string> CommandNames();

// TAB completion of a command name, as redis-cli's: the names and aliases (set, delete, exit)
// starting with `prefix`, case-insensitively, sorted; in upper case when `prefix` is (SE: SET,
// SETNX), else in lower case.
std::vector<std::string> CompleteCommandName(absl::string_view prefix);

// The argument hint the interactive shell shows after the cursor while `line` is typed, as
// redis-cli's: for a known command name, the rest of its usage (the same table as the help
// text): "set" -> " KEY VALUE [NX|XX] [GET]", "set k " -> "VALUE [NX|XX] [GET]". Each argument
// typed (a complete or a partial word) takes off one required argument of the usage; optional
// ones ([...]) stay, as redis-cli keeps them. Only the last command of the line counts (after
// ';'). Empty when there is nothing to hint: no command, an unknown one, unbalanced quotes, no
// required argument left and no optional one, or a line ending in ';'.
std::string ArgumentHint(absl::string_view line);

// A reply, as a redis server would give it.
struct Reply {
  enum class Kind { kStatus, kError, kNil, kString, kInteger, kArray, kText };
  Kind kind = Kind::kNil;
  std::string text;  // status, error message, string bytes, or preformatted text (ends in \n)
  int64_t integer = 0;
  std::vector<Reply> elements;

  static Reply Status(std::string s);
  static Reply Error(std::string message);  // e.g. "ERR wrong number of arguments ..."
  static Reply Nil();
  static Reply String(std::string bytes);
  static Reply Integer(int64_t i);
  static Reply Array(std::vector<Reply> elements);
  static Reply Text(std::string text);
  // True for an error, or an array holding one.
  bool failed() const;
};

// How redis-cli prints `reply` on a terminal (raw = false) or with --raw (but a nil is (nil) in
// both). Ends with a newline.
std::string Format(const Reply& reply, bool raw);

// The error reply for a failed store operation: "ERR message" for bad arguments, "ERR message"
// without the store's "kv: " for a refused stored value (FailedPrecondition: incr of a value that
// is not an integer, as Redis words it: "ERR value is not an integer or out of range"), else the
// status code's name, e.g. "UNAVAILABLE kv: the key's shard on node 1 cannot be reached: ...".
Reply ErrorReply(const absl::Status& status);

// One shard's statistics, as Client::Stats reports them.
using StatsRow = kv::ShardStats;

// A table with one line per shard and a total (raw: tab-separated, with a header line).
std::string FormatStats(absl::Span<const StatsRow> rows, bool raw);

// INFO's text, as Redis prints its INFO: "# Keyspace" (db0:keys=N,shards=S,memory_bytes=B) and
// "# Shards" (one line per shard: shardI:node=..,buckets=..,items=..,...), sections apart by an
// empty line. `section` (case-insensitive): "keyspace", "shards", or empty, "all", "default" or
// "everything" for both; any other section is an empty text, as Redis answers it.
std::string FormatInfo(absl::Span<const StatsRow> rows, absl::string_view section);

// The reply of a SCAN step: the next cursor (in decimal, as a string) and the keys.
Reply ScanReply(uint64_t cursor, std::vector<std::string> keys);

// "512 B", "2.0 KiB", "1.5 MiB", ...
std::string HumanBytes(uint64_t bytes);

}  // namespace kvsh
}  // namespace farm

#endif  // FARM_TOOLS_KVSH_LIB_H_
