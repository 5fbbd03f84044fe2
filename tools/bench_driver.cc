#include "tools/bench_driver.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "platform/json.h"

namespace farm {

std::string FindRunfile(const std::string& rel, const std::string& beside_binary) {
  std::vector<std::string> candidates;
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* d = std::getenv(env); d != nullptr)
      candidates.push_back(absl::StrCat(d, "/farm/", rel));
  }
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    const std::string path(exe, static_cast<size_t>(n));
    candidates.push_back(absl::StrCat(path, ".runfiles/farm/", rel));
    candidates.push_back(absl::StrCat(path.substr(0, path.rfind('/') + 1), beside_binary));
  }
  candidates.push_back(rel);
  for (const std::string& c : candidates) {
    // A file: beside a binary in a runfiles tree, tools/lincheck is also the package's folder.
    struct stat st;
    if (stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(c.c_str(), R_OK) == 0) {
      return c;
    }
  }
  return "";
}

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::set<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> range = absl::StrSplit(absl::StripAsciiWhitespace(part), '-');
    int lo = 0, hi = 0;
    if (range.size() > 2 || !absl::SimpleAtoi(range[0], &lo) ||
        !absl::SimpleAtoi(range.back(), &hi) || lo < 0 || hi < lo || hi >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not a CPU or range"));
    }
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

absl::Status PinTo(absl::string_view text) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
  if (!cpus.ok()) return cpus.status();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : *cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot pin to CPUs ", text, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string AffinityText() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "?";
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return absl::StrJoin(cpus, ",");
}

absl::Status UsePrivateDevShm() {
  if (unshare(CLONE_NEWNS) != 0 ||
      mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=50%") != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--private_dev_shm: cannot mount a private /dev/shm (needs root): ", strerror(errno)));
  }
  return absl::OkStatus();
}

bool FlagsAreValid(absl::string_view program, int argc, char** argv) {
  static const std::set<std::string> kBuiltin = {
      "help",     "helpfull", "helpshort",  "helppackage", "version", "only_check_args",
      "flagfile", "fromenv",  "tryfromenv", "undefok"};
  const std::string prog(program);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    if (kBuiltin.count(name) > 0) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>() && eq == absl::string_view::npos) continue;
      flag = nullptr;
    }
    if (flag == nullptr) {
      std::fprintf(stderr, "%s: unknown flag --%s (see --help)\n", prog.c_str(), name.c_str());
      return false;
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "%s: --%s needs a value\n", prog.c_str(), name.c_str());
      return false;
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "%s: --%s=%s: %s\n", prog.c_str(), name.c_str(), value.c_str(),
                   error.c_str());
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> RunTool(const std::string& rel,
                                                 const std::vector<std::string>& args,
                                                 const std::string& cpus) {
  const std::string bin = FindRunfile(rel, rel.substr(rel.rfind('/') + 1));
  if (bin.empty()) return absl::NotFoundError(absl::StrCat(rel, " is not built"));
  std::string cmd = cpus.empty() ? "" : absl::StrCat("taskset -c '", cpus, "' ");
  absl::StrAppend(&cmd, "'", bin, "'");
  for (const std::string& a : args) absl::StrAppend(&cmd, " '", a, "'");
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot run ", cmd));
  std::string out;
  char buf[1024];
  while (fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  const int rc = pclose(f);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat(rel, " failed (wait status ", rc, "): ", out));
  }
  return std::vector<std::string>(absl::StrSplit(out, '\n', absl::SkipEmpty()));
}

absl::StatusOr<double> JsonNumber(absl::string_view line, absl::string_view key) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  const size_t at = line.find(quoted);
  if (at == absl::string_view::npos) {
    return absl::NotFoundError(absl::StrCat("no \"", key, "\" in: ", line));
  }
  absl::string_view rest = line.substr(at + quoted.size());
  rest = rest.substr(0, rest.find_first_of(",}"));
  double v = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(rest), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" is not a number in: ", line));
  }
  return v;
}

CoresAwake::CoresAwake(bool want) {
  if (!want) {
    why_not_ = "not asked";
    return;
  }
  const int fd = open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    why_not_ = absl::StrCat("/dev/cpu_dma_latency: ", std::strerror(errno));
    return;
  }
  // The kernel takes a binary 32-bit value (or text); 0 µs: no idle state with an exit latency.
  const int32_t zero = 0;
  if (write(fd, &zero, sizeof(zero)) != static_cast<ssize_t>(sizeof(zero))) {
    why_not_ = absl::StrCat("writing /dev/cpu_dma_latency: ", std::strerror(errno));
    close(fd);
    return;
  }
  fd_ = fd;
}

CoresAwake::~CoresAwake() {
  if (fd_ >= 0) close(fd_);  // the request ends with the file
}

absl::StatusOr<uint64_t> ResidentBytesOf(int pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  char line[256];
  uint64_t kib = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof(line), f) != nullptr) {
    absl::string_view l(line);
    if (absl::ConsumePrefix(&l, "VmRSS:")) {
      l = absl::StripAsciiWhitespace(l);
      found =
          absl::ConsumeSuffix(&l, "kB") && absl::SimpleAtoi(absl::StripAsciiWhitespace(l), &kib);
    }
  }
  std::fclose(f);
  if (!found) return absl::InternalError(absl::StrCat(path, " has no VmRSS line"));
  return kib * 1024;
}

double LoadAverage() {
  double l = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r"); f != nullptr) {
    if (std::fscanf(f, "%lf", &l) != 1) l = 0;
    std::fclose(f);
  }
  return l;
}

std::string SourceCommit() {
  static const std::string commit = [] {
    const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
    const std::string dir = ws != nullptr ? ws : ".";
    const std::string cmd =
        absl::StrCat("git -C '", dir, "' describe --always --dirty --abbrev=12 2>/dev/null");
    std::string out;
    if (FILE* f = popen(cmd.c_str(), "r"); f != nullptr) {
      char buf[256];
      while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
      if (pclose(f) != 0) out.clear();
    }
    out = std::string(absl::StripAsciiWhitespace(out));
    return out.empty() ? std::string("unknown") : out;
  }();
  return commit;
}

std::string RunInfoJson(const RunInfo& info) {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown");
  return absl::StrFormat(
      ",\"schema\":%d,\"tool\":%s,\"commit\":%s,\"host\":%s,\"seed\":%d,"
      "\"duration_ms\":%d,\"warmup_ms\":%d,\"cores_awake\":%s,\"load_avg\":%.2f",
      kBenchSchema, JsonString(info.tool), JsonString(SourceCommit()), JsonString(host), info.seed,
      info.duration_ms, info.warmup_ms, info.cores_awake ? "true" : "false", LoadAverage());
}

}  // namespace farm
