// kvsh: a shell for the key-value store (kv/kv.h), in the manner of redis-cli.
//
//   kvsh --local=3                              start 3 node processes holding shards, and a shell
//   kvsh --config=cluster.textproto             attach to a running cluster (as a `late` node)
//   kvsh --config=cluster.textproto get a       run one command and exit (as redis-cli)
//   kvsh --local=3 -c 'put a 1; get a'          run command lines and exit (kvsh's own -c)
//   printf 'put a 1\nget a\n' | kvsh --local=3  script mode: one command per line of stdin
//   kvsh --config=cluster.textproto --pipe <f   bulk load: errors and a count, no replies
//
// The shell is itself a node of the cluster (the platform is symmetric): it joins through the
// configuration manager under a node id the configuration reserves for it, creates the store
// without a shard of its own (kv::Options::hold_shard = false) and leaves when it exits. With
// --local=N it first writes a configuration of N serving nodes plus itself (and --late_nodes more
// slots for other clients) and starts N //tools:node --kv processes, supervised as
// //tools:cluster supervises its nodes (they die with the shell, even on SIGKILL); they stop
// when the shell leaves.
//
// Exit status: 0 when every command succeeded (a get of a missing key is not an error: (nil));
// 1 when a command failed (an error reply: bad arguments, a value too large, an unreachable
// shard) or the shell lost the cluster; 2 for bad flags, a bad configuration, or a cluster the
// shell could not start or join; 128+N when stopped by signal N (SIGTERM, SIGHUP; SIGINT outside
// the interactive shell).
#include <editline/readline.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/runtime_impl.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/logging.h"
#include "platform/poller.h"
#include "spdlog/spdlog.h"
#include "tools/child_process.h"
#include "tools/kv_commands.h"
#include "tools/kv_session.h"
#include "tools/kvsh_lib.h"

// The standard node flags (api/node_main.cc, part of //:farm): the shell is a node too.
ABSL_DECLARE_FLAG(std::string, config);
ABSL_DECLARE_FLAG(int, node_id);
ABSL_DECLARE_FLAG(std::string, provider);
ABSL_DECLARE_FLAG(std::string, endpoint);
ABSL_DECLARE_FLAG(std::string, poll);
ABSL_DECLARE_FLAG(int64_t, ring_size);
ABSL_DECLARE_FLAG(int, workers);
ABSL_DECLARE_FLAG(bool, control_stdin);
ABSL_DECLARE_FLAG(bool, fill_pattern);
ABSL_DECLARE_FLAG(std::string, log_level);

ABSL_FLAG(std::string, c, "",
          "kvsh's own (redis-cli's -c is cluster mode): run these commands and exit; ';' and "
          "newlines separate them, as in script mode. Commands can also be given as arguments, "
          "as redis-cli takes them: kvsh --local=3 get a");
ABSL_FLAG(bool, x, false,
          "read the last argument of the command from standard input, all of it (a final newline "
          "included), as redis-cli -x: echo -n hello | kvsh ... -x put greeting");
ABSL_FLAG(int, r, 1,
          "run the command (arguments or -c) this many times, as redis-cli -r; -1: until "
          "stopped (Ctrl-C)");
ABSL_FLAG(double, i, 0, "with -r: seconds to wait between runs (as redis-cli -i)");
ABSL_FLAG(bool, pipe, false,
          "bulk load, as redis-cli --pipe: run each line of standard input as a command without "
          "printing replies (errors go to standard error), then print 'errors: N, replies: M'; "
          "exit status 1 if any failed");
ABSL_FLAG(bool, scan, false,
          "list every key, one per line, bare, as redis-cli --scan: a whole SCAN iteration "
          "(with --pattern and --count), then exit");
ABSL_FLAG(std::string, pattern, "", "with --scan: only the keys matching this glob (scan MATCH)");
ABSL_FLAG(uint64_t, count, 10, "with --scan: home buckets per scan step (scan COUNT)");
ABSL_FLAG(bool, raw, false,
          "print bare values (no quotes, escapes or (integer)), one per line, as redis-cli "
          "--raw; a missing key still prints (nil), so that it differs from an empty value "
          "(redis-cli --raw prints an empty line for both)");
ABSL_FLAG(std::string, history_file, "~/.kvsh_history",
          "history of the interactive shell; empty: none");

namespace farm {
namespace {

using kvsh::LocalCluster;

const kvsh::SessionTool kShellTool{"kvsh", "the shell"};

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Writes everything (stdout may be a pipe); false if the reader went away.
bool WriteAll(int fd, absl::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The shell.

class Shell {
 public:
  Shell(std::unique_ptr<Runtime> rt, std::unique_ptr<kv::Store> store,
        std::unique_ptr<Worker> worker, bool raw, bool interactive, LocalCluster* local)
      : rt_(std::move(rt)),
        store_(std::move(store)),
        worker_(std::move(worker)),
        client_(std::make_unique<kv::Client>(*store_, *worker_)),
        commands_(*client_, *worker_, kvsh::StoreLimits(*store_), raw),
        raw_(raw),
        interactive_(interactive),
        local_(local) {}

  ~Shell() {
    client_.reset();
    worker_.reset();
    rt_.reset();  // leaves the cluster; the store's handlers go with it
    store_.reset();
  }

  // Runs every command of `line`; false once the shell should stop (quit, lost cluster, broken
  // output).
  bool RunLine(absl::string_view line) {
    absl::StatusOr<std::vector<std::vector<kvsh::Token>>> commands = kvsh::SplitLine(line);
    if (!commands.ok()) {
      return Print(kvsh::Reply::Error(absl::StrCat("ERR ", commands.status().message())));
    }
    for (const std::vector<kvsh::Token>& tokens : *commands) {
      if (!RunCommand(tokens)) return false;
    }
    return true;
  }

  // Runs one command; false once the shell should stop.
  bool RunCommand(const std::vector<kvsh::Token>& tokens) {
    if (!CheckCluster()) return false;
    absl::StatusOr<kvsh::Command> c = kvsh::ParseCommand(tokens, limits());
    if (!c.ok()) return Print(kvsh::Reply::Error(absl::StrCat("ERR ", c.status().message())));
    if (c->op == kvsh::Op::kQuit) return false;
    return Print(commands_.Execute(*c));
  }

  // --scan: every key matching `pattern`, bare, one per line, as each step returns them (as
  // redis-cli --scan); an error ends it (printed, and counted as a failed command).
  void ListKeys(const std::string& pattern, uint64_t count) {
    uint64_t cursor = 0;
    do {
      absl::StatusOr<kv::ScanPage> page = client_->Scan(cursor, count, pattern);
      if (!page.ok()) {
        Print(kvsh::ErrorReply(page.status()));
        return;
      }
      std::string out;
      for (const std::string& k : page->keys) absl::StrAppend(&out, k, "\n");
      if (!WriteAll(STDOUT_FILENO, out)) {
        ++failures_;
        return;
      }
      cursor = page->cursor;
    } while (cursor != 0);
  }

  // Prints "(error) ERR message" (and counts it as a failed command).
  void PrintError(absl::string_view message) {
    Print(kvsh::Reply::Error(absl::StrCat("ERR ", message)));
  }

  // --pipe: replies are counted, not printed (errors still are), and a progress count goes to
  // standard error when that is a terminal.
  void set_pipe() {
    pipe_ = true;
    progress_ = isatty(STDERR_FILENO) != 0;
  }
  // --pipe's summary, as redis-cli --pipe ends: "errors: N, replies: M".
  std::string PipeSummary() {
    return absl::StrCat(progress_shown_ ? "\n" : "", "errors: ", failures_, ", replies: ", replies_,
                        "\n");
  }

  // Reports nodes of a --local cluster that died; false when this shell is no longer a member.
  bool CheckCluster() {
    if (local_ != nullptr) {
      std::string logs;
      if (std::optional<std::string> dead = local_->CheckChildren(&logs); dead.has_value()) {
        if (interactive_) WriteAll(STDOUT_FILENO, "\n");  // off the line being typed
        spdlog::warn("{}: the keys of its shard cannot be reached now{}\n{}", *dead,
                     provider() == "shm"
                         ? "; on shm a node that dies may also leave the others stuck (libfabric "
                           "1.17's shm is not crash-tolerant: README, \"Providers\"), so the "
                           "rest of the cluster may not answer either"
                         : "",
                     logs);
        noticed_ = true;
      }
    }
    const absl::Status evicted = RuntimeAccess::Of(*rt_).node->evicted();
    if (!evicted.ok()) {
      ++failures_;
      Print(kvsh::Reply::Error(absl::StrCat(
          "UNAVAILABLE this shell is no longer a member of the cluster (", evicted.message(),
          "); start kvsh again to rejoin")));
      return false;
    }
    return true;
  }

  // True once after CheckCluster printed a notice (the interactive shell redraws its line).
  bool TakeNotice() { return std::exchange(noticed_, false); }
  // The number of the input line being run (script mode, --pipe, -c over several lines), for
  // error messages (0: none).
  void set_line(int line) { line_ = line; }
  int failures() const { return failures_; }
  const kvsh::Limits& limits() const { return commands_.limits(); }
  uint32_t node_id() const { return rt_->node_id(); }
  std::string provider() const { return rt_->provider(); }

 private:
  // Prints a reply: on standard output, except that outside the interactive shell an error
  // goes to standard error, so that scripts can tell them apart (redis-cli prints them on
  // standard output), with the input line it came from. With --pipe only errors are printed.
  // False when the output is gone.
  bool Print(const kvsh::Reply& r) {
    ++replies_;
    if (r.failed()) ++failures_;
    const bool is_error = r.kind == kvsh::Reply::Kind::kError;
    if (pipe_ && !is_error) {
      ShowProgress();
      return true;
    }
    const bool to_stderr = !interactive_ && is_error;
    std::string text = kvsh::Format(r, raw_);
    if (to_stderr && line_ > 0) text.insert(text.size() - 1, absl::StrCat(" (line ", line_, ")"));
    if (!WriteAll(to_stderr ? STDERR_FILENO : STDOUT_FILENO, text)) {
      ++failures_;
      return false;
    }
    return true;
  }

  // --pipe on a terminal: "replies: M, errors: N" on standard error, redrawn every 250 ms.
  void ShowProgress() {
    if (!progress_ || absl::Now() - last_progress_ < absl::Milliseconds(250)) return;
    last_progress_ = absl::Now();
    progress_shown_ = true;
    WriteAll(STDERR_FILENO, absl::StrCat("\rreplies: ", replies_, ", errors: ", failures_));
  }

  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<kv::Store> store_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<kv::Client> client_;
  kvsh::KvCommands commands_;
  const bool raw_;
  const bool interactive_;
  LocalCluster* const local_;
  int failures_ = 0;
  int64_t replies_ = 0;
  int line_ = 0;
  bool noticed_ = false;
  bool pipe_ = false;
  bool progress_ = false;
  bool progress_shown_ = false;
  absl::Time last_progress_ = absl::InfinitePast();
};

// ---------------------------------------------------------------------------------------------
// Input.

// Waits for `fd` to be readable or a signal; returns the signal number (0: `fd` is readable).
// Checks the cluster every half second meanwhile (and calls `after_notice` when that printed
// something).
int WaitInput(int fd, int signal_fd, Shell& shell, bool* lost,
              void (*after_notice)() = nullptr) {
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    const int n = poll(fds, 2, 500);
    if (n > 0 && (fds[1].revents & POLLIN)) {
      signalfd_siginfo info{};
      if (read(signal_fd, &info, sizeof(info)) > 0) return static_cast<int>(info.ssi_signo);
    }
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) return 0;
    if (!shell.CheckCluster()) {
      *lost = true;
      return 0;
    }
    if (shell.TakeNotice() && after_notice != nullptr) after_notice();
  }
}

// Script mode: one command line per line of standard input, no prompt. Returns the signal that
// stopped it, or 0.
int RunScript(Shell& shell, int signal_fd) {
  std::string pending;
  int line = 0;
  for (bool eof = false; !eof;) {
    bool lost = false;
    const int sig = WaitInput(STDIN_FILENO, signal_fd, shell, &lost);
    if (lost) return 0;
    if (sig != 0) return sig;
    char buf[65536];
    const ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      eof = true;
    } else {
      pending.append(buf, static_cast<size_t>(got));
    }
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      shell.set_line(++line);
      if (!shell.RunLine(absl::string_view(pending).substr(start, nl - start))) return 0;
    }
    pending.erase(0, start);
    if (eof && !pending.empty()) {
      shell.set_line(++line);
      if (!shell.RunLine(pending)) return 0;
    }
  }
  return 0;
}

// The interactive shell: libedit's line editing (its callback interface, so that signals and a
// dying cluster are noticed while the user types), a history file, TAB completion of command
// names and redis-cli's argument hints.
//
// Hints: redis-cli (linenoise) draws the rest of a command's syntax greyed after the cursor, and
// redraws it on every key. libedit has no hint hook: its readline emulation leaves out
// rl_redisplay_function, rl_bind_key takes only rl_insert, and the EditLine handle behind it
// is private, so el_set(EL_ADDFN) cannot be reached. What it does offer is rl_add_defun (a
// function bound to a key, called with rl_line_buffer, rl_point and rl_end brought up to date)
// and rl_insert (pushes a key into its input). So after each key the user types, the shell
// pushes kHintKey, whose function draws the hint after the cursor (grey, cut to the terminal's
// width) and moves the cursor back; the hint is erased (to the end of the line) before the next
// key is read, while the cursor still sits where the hint was drawn. libedit does not know of
// the hint, which is why it is only drawn with the cursor at the end of a line that fits on one
// terminal row. rl_line_buffer is libedit's conversion buffer, which it reallocates for lines
// over about 1 KiB without always updating rl_line_buffer: once a line has been that long
// (kMaxTrustedLine), hints, and completion past the first word, are off for the session.
struct Interactive {
  static constexpr char kPrompt[] = "kvsh> ";
  static constexpr int kHintKey = 0x1d;  // ^], ed-ignore in libedit's emacs keymap
  static constexpr int kMaxTrustedLine = 512;
  static Interactive* current;
  Shell* shell = nullptr;
  bool stop = false;
  bool line_done = false;  // libedit handed over a line: install the handler again
  bool hints = false;      // standard output is a terminal that takes ANSI escapes
  bool hint_shown = false;
  bool line_buffer_trusted = true;
  bool completing = false;  // the key was TAB
  std::string history;

  static void OnLine(char* line) {
    Interactive& self = *current;
    self.line_done = true;
    if (line == nullptr) {  // Ctrl-D
      WriteAll(STDOUT_FILENO, "\n");
      self.stop = true;
      return;
    }
    const std::string text(line);
    std::free(line);
    if (!absl::StripAsciiWhitespace(text).empty()) add_history(text.c_str());
    if (!self.shell->RunLine(text)) self.stop = true;
  }

  // The line being edited, when rl_line_buffer can be read (see kMaxTrustedLine).
  std::optional<std::string> Line() {
    if (rl_end >= kMaxTrustedLine) line_buffer_trusted = false;
    if (!line_buffer_trusted || rl_line_buffer == nullptr || rl_end < 0) return std::nullopt;
    return std::string(rl_line_buffer, static_cast<size_t>(rl_end));
  }

  static char* NextCommandName(const char* text, int state) {
    static size_t index;
    static std::vector<std::string> names;
    if (state == 0) {
      index = 0;
      names = kvsh::CompleteCommandName(text);
    }
    return index < names.size() ? strdup(names[index++].c_str()) : nullptr;
  }

  // Completes command names at the start of a command, and help's argument; nothing else (keys
  // are not listed).
  static char** Complete(const char* text, int start, int) {
    rl_attempted_completion_over = 1;
    current->completing = true;
    if (start > 0) {
      const std::optional<std::string> line = current->Line();
      if (!line.has_value() || static_cast<size_t>(start) > line->size()) return nullptr;
      const absl::string_view before = absl::string_view(*line).substr(0, start);
      const size_t semi = before.rfind(';');
      absl::string_view command = absl::StripAsciiWhitespace(
          semi == absl::string_view::npos ? before : before.substr(semi + 1));
      const bool after_help = absl::EqualsIgnoreCase(command, "help");
      if (!command.empty() && !after_help) return nullptr;
    }
    return rl_completion_matches(text, NextCommandName);
  }

  static int TerminalColumns() {
    winsize w{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
    return 80;
  }

  // kHintKey's function: draws the hint for the line as it is now.
  static int DrawHint(int, int) {
    Interactive& self = *current;
    if (!self.hints) return 0;
    const std::optional<std::string> line = self.Line();
    if (!line.has_value() || rl_point != rl_end || line->find('\0') != std::string::npos) {
      return 0;
    }
    std::string hint = kvsh::ArgumentHint(*line);
    if (hint.empty()) return 0;
    int used = static_cast<int>(std::strlen(kPrompt));
    for (const char c : *line) used += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? 2 : 1;
    const int room = TerminalColumns() - 1 - used;  // the last column would wrap
    if (room <= 0) return 0;
    if (static_cast<int>(hint.size()) > room) hint.resize(static_cast<size_t>(room));
    // Grey (bright black, as redis-cli's hints), then back over the hint.
    std::fputs(absl::StrCat("\x1b[90m", hint, "\x1b[0m\x1b[", hint.size(), "D").c_str(), stdout);
    std::fflush(stdout);
    self.hint_shown = true;
    return 0;
  }

  // Erases the hint drawn after the cursor, which has not moved since.
  void EraseHint() {
    if (!hint_shown) return;
    std::fputs("\x1b[K", stdout);
    std::fflush(stdout);
    hint_shown = false;
  }

  // Returns the signal that ended the shell (SIGTERM, SIGHUP), or 0.
  int Run(int signal_fd) {
    current = this;
    const char* term = std::getenv("TERM");
    hints = isatty(STDOUT_FILENO) && term != nullptr && std::strcmp(term, "dumb") != 0;
    rl_readline_name = const_cast<char*>("kvsh");
    rl_attempted_completion_function = Complete;
    stifle_history(1000);
    if (!history.empty()) read_history(history.c_str());
    rl_callback_handler_install(kPrompt, OnLine);
    rl_add_defun("kvsh-hint", DrawHint, kHintKey);
    int result = 0;
    while (!stop) {
      bool lost = false;
      // A warning printed meanwhile ran over the line being typed: draw it again.
      const int sig = WaitInput(STDIN_FILENO, signal_fd, *shell, &lost, [] {
        current->hint_shown = false;
        rl_forced_update_display();
      });
      if (lost) break;
      EraseHint();
      if (sig == SIGINT) {
        // Ctrl-C drops the line being typed, as a shell does; Ctrl-D or quit leaves.
        rl_replace_line("", 0);
        WriteAll(STDOUT_FILENO, "^C\n");
        rl_callback_handler_remove();
        rl_callback_handler_install(kPrompt, OnLine);
        continue;
      }
      if (sig != 0) {
        result = sig;
        break;
      }
      completing = false;
      rl_callback_read_char();
      if (!line_done && !stop && !completing) {
        rl_insert(1, kHintKey);  // read at once by the next call: DrawHint
        rl_callback_read_char();
      } else if (!line_done && !stop) {
        // After TAB, the hint is drawn without kHintKey: libedit lists the matches on a second
        // TAB only if no other command ran in between. Its completion (fn_complete) brought
        // rl_point and rl_end up to date.
        DrawHint(0, 0);
      }
      if (line_done && !stop) {
        // libedit leaves its callback mode after each line; this shows the prompt again.
        line_done = false;
        rl_callback_handler_install(kPrompt, OnLine);
      }
    }
    rl_callback_handler_remove();
    if (!history.empty()) {
      if (write_history(history.c_str()) == 0) {
        chmod(history.c_str(), 0600);
      } else {
        spdlog::debug("cannot write the history to {}", history);
      }
    }
    return result;
  }
};
Interactive* Interactive::current = nullptr;

std::string HistoryPath() {
  std::string path = absl::GetFlag(FLAGS_history_file);
  if (absl::StartsWith(path, "~/")) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0') return "";
    path = absl::StrCat(home, path.substr(1));
  }
  return path;
}

// ---------------------------------------------------------------------------------------------
// Flags.

// absl's parser exits with status 1 on an unknown flag or a bad value; kvsh promises 2 for bad
// flags, so it checks them first: every -name[=value] / --name [value] must be a flag (or
// --noname of a bool flag) and its value must parse. As redis-cli, the flags end at the first
// word that is not one: that word and the rest are a command (`kvsh --local=3 put k -1`).
// Returns the index of that word, or argc when there is none.
absl::StatusOr<int> CheckArgv(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") return argc;                 // the nodes' arguments follow
    if (a.size() < 2 || a[0] != '-') return i;  // the command
    absl::ConsumePrefix(&a, "-");
    absl::ConsumePrefix(&a, "-");
    const size_t eq = a.find('=');
    const absl::string_view name = a.substr(0, eq);
    // absl's own: usage (its parser handles them) and flag files.
    if (name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
        name == "helpon" || name == "helpmatch" || name == "version" ||
        name == "only_check_args" || name == "flagfile" || name == "fromenv" ||
        name == "tryfromenv" || name == "undefok") {
      return argc;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>() && eq == absl::string_view::npos) {
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (--help lists kvsh's flags)"));
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(a.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
  }
  return argc;
}

bool GivenOnCommandLine(int argc, char** argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (!absl::ConsumePrefix(&a, "--")) {
      if (!absl::ConsumePrefix(&a, "-")) continue;
    }
    if (a == name || absl::StartsWith(a, absl::StrCat(name, "="))) return true;
  }
  return false;
}

// The flags that say how commands are given (-c, a command as arguments, -x, -r, -i, --pipe,
// --scan) fit together. scan_options_given: --pattern or --count is on the command line (even
// with --count's default value, which GetFlag cannot tell apart).
absl::Status CheckCommandFlags(bool c_given, bool scan_options_given,
                               const std::vector<std::string>& command) {
  if (c_given && !command.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "give the commands either with -c or as arguments ('", command[0], "' ...), not both"));
  }
  if (absl::GetFlag(FLAGS_x) && command.empty()) {
    return absl::InvalidArgumentError(
        "-x reads the last argument of a command given as arguments: kvsh ... -x put KEY");
  }
  const int repeat = absl::GetFlag(FLAGS_r);
  if (repeat == 0 || repeat < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("-r must be a number of runs (1 or more), or -1 for ever, not ", repeat));
  }
  if (repeat != 1 && !c_given && command.empty()) {
    return absl::InvalidArgumentError("-r repeats a command given as arguments or with -c");
  }
  const double interval = absl::GetFlag(FLAGS_i);
  if (!(interval >= 0) || interval > 1e6) {
    return absl::InvalidArgumentError(
        absl::StrCat("-i must be 0 to 1000000 seconds, not ", interval));
  }
  const bool scan = absl::GetFlag(FLAGS_scan);
  if (scan && (c_given || !command.empty() || repeat != 1 || absl::GetFlag(FLAGS_pipe))) {
    return absl::InvalidArgumentError(
        "--scan lists the keys: no -c, command arguments, -r or --pipe with it");
  }
  if (!scan && scan_options_given) {
    return absl::InvalidArgumentError(
        "--pattern and --count go with --scan (kvsh --scan [--pattern P] [--count N]); in the "
        "shell, scan CURSOR [MATCH P] [COUNT N]");
  }
  if (absl::GetFlag(FLAGS_count) == 0) {
    return absl::InvalidArgumentError("--count must be at least 1");
  }
  if (absl::GetFlag(FLAGS_pipe) && (c_given || !command.empty() || repeat != 1)) {
    return absl::InvalidArgumentError(
        "--pipe reads its commands from standard input: no -c, command arguments or -r with it");
  }
  return absl::OkStatus();
}

// Runs the command given as arguments (with -x: its last argument from standard input) or with
// -c, -r times, -i seconds apart. Returns the signal that stopped it, or 0.
int RunCommandLine(Shell& shell, const std::vector<std::string>& command, int signal_fd) {
  std::vector<kvsh::Token> tokens = kvsh::WordTokens(command);
  if (absl::GetFlag(FLAGS_x)) {
    std::string in;
    char buf[65536];
    for (;;) {
      // Signals stay deliverable (Ctrl-C while it waits for a terminal's input).
      bool lost = false;
      if (const int sig = WaitInput(STDIN_FILENO, signal_fd, shell, &lost); sig != 0) return sig;
      if (lost) return 0;
      const ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
      if (got == 0) break;
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        shell.PrintError(absl::StrCat("-x: cannot read standard input: ", std::strerror(errno)));
        return 0;
      }
      in.append(buf, static_cast<size_t>(got));
      // Refused without reading to the end (an endless input).
      if (in.size() > shell.limits().max_value_size) {
        shell.PrintError(absl::StrCat("-x: standard input holds more than ",
                                      shell.limits().max_value_size,
                                      " bytes, the limit of a value (",
                                      kvsh::HumanBytes(shell.limits().max_value_size), ")"));
        return 0;
      }
    }
    tokens.push_back(kvsh::Token{std::move(in), true});
  }
  const std::string text = absl::GetFlag(FLAGS_c);
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  const int repeat = absl::GetFlag(FLAGS_r);
  const absl::Duration interval = absl::Seconds(absl::GetFlag(FLAGS_i));
  for (int64_t run = 0; repeat < 0 || run < repeat; ++run) {
    if (run > 0) {
      // The pause between runs (none with -i 0), cut short by a signal (Ctrl-C ends -r -1).
      pollfd p{signal_fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(interval))) > 0) {
        signalfd_siginfo info{};
        if (read(signal_fd, &info, sizeof(info)) > 0) return static_cast<int>(info.ssi_signo);
      }
    }
    if (!command.empty()) {
      if (!shell.RunCommand(tokens)) return 0;
      continue;
    }
    // -c: each line as script mode runs it (a newline separates commands as ';' does).
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines.size() > 1) shell.set_line(static_cast<int>(i + 1));
      if (!shell.RunLine(lines[i])) return 0;
    }
  }
  return 0;
}

int Main(int argc, char** argv, const std::vector<std::string>& node_args,
         const std::vector<std::string>& command) {
  const bool c_given = GivenOnCommandLine(argc, argv, "c");
  const bool command_given = c_given || !command.empty() || absl::GetFlag(FLAGS_scan);
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "kvsh"); !s.ok()) {
    spdlog::error("--log_level: {}", std::string(s.message()));
    return kExitUsage;
  }
  spdlog::default_logger()->set_pattern("kvsh %l: %v");
  if (absl::Status s = kvsh::CheckClusterFlags(kShellTool); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  const bool scan_options_given =
      GivenOnCommandLine(argc, argv, "pattern") || GivenOnCommandLine(argc, argv, "count");
  if (absl::Status s = CheckCommandFlags(c_given, scan_options_given, command); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  const int local_nodes = absl::GetFlag(FLAGS_local);
  if (!node_args.empty() && local_nodes == 0) {
    spdlog::error("arguments after -- go to the nodes of --local; there are none to give them");
    return kExitUsage;
  }

  // Signals are taken through a signalfd; block them before any thread starts.
  const int signal_fd = BlockTerminationSignals();

  kvsh::KvSession session = kvsh::OpenKvSession(kShellTool, signal_fd, node_args);
  if (session.exit_code != 0) return session.exit_code;
  std::unique_ptr<LocalCluster> local = std::move(session.local);
  const std::vector<std::string>& shard_nodes = session.shard_nodes;
  const bool interactive = !command_given && !absl::GetFlag(FLAGS_pipe) && isatty(STDIN_FILENO);
  Shell shell(std::move(session.runtime), std::move(session.store), std::move(session.worker),
              absl::GetFlag(FLAGS_raw), interactive, local.get());

  int signal_seen = 0;
  if (absl::GetFlag(FLAGS_scan)) {
    shell.ListKeys(absl::GetFlag(FLAGS_pattern), absl::GetFlag(FLAGS_count));
  } else if (command_given) {
    signal_seen = RunCommandLine(shell, command, signal_fd);
  } else if (absl::GetFlag(FLAGS_pipe)) {
    shell.set_pipe();
    signal_seen = RunScript(shell, signal_fd);
    WriteAll(STDOUT_FILENO, shell.PipeSummary());
  } else if (interactive) {
    std::string banner = absl::StrCat(
        "kvsh: node ", shell.node_id(), " of a cluster with shards on node(s) ",
        absl::StrJoin(shard_nodes, ", "), ", provider ", shell.provider(),
        local != nullptr ? " (started by kvsh; it stops when you leave)" : "", "\n");
    if (local != nullptr && absl::GetFlag(FLAGS_late_nodes) > 0 &&
        !absl::GetFlag(FLAGS_write_config).empty()) {
      absl::StrAppend(&banner, "Other clients attach with --config=",
                      kvsh::UserPath(absl::GetFlag(FLAGS_write_config)), "\n");
    }
    absl::StrAppend(&banner, "Type 'help' for the commands, 'quit' or Ctrl-D to leave.\n");
    WriteAll(STDOUT_FILENO, banner);
    Interactive i;
    i.shell = &shell;
    i.history = HistoryPath();
    signal_seen = i.Run(signal_fd);
  } else {
    signal_seen = RunScript(shell, signal_fd);
  }
  const int failures = shell.failures();
  if (signal_seen != 0) spdlog::info("stopping on signal {}", signal_seen);
  return signal_seen != 0 ? 128 + signal_seen : failures > 0 ? kExitFailed : kExitOk;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a shell for the farm key-value store, in the manner of redis-cli.\n"
      "\n"
      "  kvsh --local=3                          start 3 KV nodes on this host and a shell on "
      "them\n"
      "  kvsh --config=FILE [--node_id=N]        join a running cluster (as a `late` node: the\n"
      "                                          first free one unless --node_id says which)\n"
      "  kvsh ... [-x] [-r N [-i S]] CMD ARG...   run one command and exit, as redis-cli: -x\n"
      "                                          reads its last argument from standard input,\n"
      "                                          -r runs it N times (-1: until Ctrl-C), S s apart\n"
      "  kvsh ... -c 'put a 1; get a'            run command lines and exit (kvsh's own -c;\n"
      "                                          redis-cli's is cluster mode): ';' and newlines\n"
      "                                          separate commands\n"
      "  printf 'put a 1\\nget a\\n' | kvsh ...   script mode: one command line per input line\n"
      "  kvsh ... --scan [--pattern P]          every key (matching P), one per line, as\n"
      "                                          redis-cli --scan\n"
      "  kvsh ... --pipe <FILE                   bulk load, as redis-cli --pipe: no replies, the\n"
      "                                          errors, then 'errors: N, replies: M'\n"
      "\n"
      "Commands: get KEY; put KEY VALUE [NX|XX] [GET] (alias set; NX: only if absent, XX: only\n"
      "if present, GET: answer the old value; read and write in one transaction); del KEY...\n"
      "(all in one transaction); cas KEY EXPECTED NEW (EXPECTED (nil): the key must be absent);\n"
      "mget KEY...; incr KEY; incrby KEY N; decr KEY; decrby KEY N; setnx KEY VALUE; getset KEY\n"
      "VALUE; append KEY VALUE; strlen KEY; exists KEY...; scan CURSOR [MATCH P] [COUNT N];\n"
      "keys PATTERN (walks the whole store); dbsize (the sum of the shards' counts); mset\n"
      "KEY VALUE... (one transaction); msetnx KEY VALUE... (only if no KEY exists); info\n"
      "[keyspace|shards]; ping [MESSAGE]; stats;\n"
      "help [COMMAND]; quit (as Redis's commands of those names). Arguments are words,\n"
      "\"double quoted\" (\\n \\t \\xHH escapes) or 'single quoted'; ';' separates commands.\n"
      "Replies print as redis-cli prints them (\"value\", (nil), (integer) 1, OK,\n"
      "(error) ERR ...); --raw prints bare values (but a missing key as (nil), unlike\n"
      "redis-cli --raw, so that it differs from an empty value). Outside the interactive shell,\n"
      "errors go to standard error, with their input line in script mode.\n"
      "The interactive shell (standard input a terminal) has line editing, TAB completion of\n"
      "command names, redis-cli's argument hints (greyed after the cursor) and a history\n"
      "(--history_file).\n"
      "\n"
      "Exit status: 0 every command succeeded (a missing key is (nil), not an error); 1 a command\n"
      "failed or the shell lost the cluster; 2 bad flags or configuration, or the cluster could\n"
      "not be started or joined; 128+N stopped by signal N.\n"
      "\n"
      "The shell is a node of the cluster: --provider, --endpoint, --poll, --ring_size, --workers\n"
      "and --log_level (default warn for kvsh) are the node flags (--ring_size and --workers\n"
      "must be the cluster's). With --local, arguments after --\n"
      "go to every node process.");
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "kvsh.cc") || absl::StrContains(file, "kv_session.cc") ||
           absl::StrContains(file, "node_main.cc");
  };
  absl::SetFlagsUsageConfig(usage);
  // A shell keeps quiet about its node's routine work unless asked (--log_level).
  absl::SetFlag(&FLAGS_log_level, "warn");
  std::vector<std::string> node_args;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      node_args.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  const absl::StatusOr<int> command_at = farm::CheckArgv(argc, argv);
  if (!command_at.ok()) {
    std::fprintf(stderr, "kvsh: %s\n", std::string(command_at.status().message()).c_str());
    return 2;
  }
  // A command as arguments: absl parses the flags before it, and the nodes get no arguments
  // (a "--" among the command's words is one of its words).
  std::vector<std::string> command(argv + *command_at, argv + argc);
  if (!command.empty()) node_args.clear();
  const std::vector<char*> positional = absl::ParseCommandLine(*command_at, argv);
  if (positional.size() != 1 + node_args.size()) {
    std::fprintf(stderr,
                 "kvsh: unexpected argument '%s' (arguments for the nodes of --local go "
                 "after --)\n",
                 positional[1]);
    return 2;
  }
  return farm::Main(*command_at, argv, node_args, command);
}
