// Process-level helpers of the benchmark drivers (txn_bench, kvbench): files shipped beside the
// binary, CPU pinning, a private /dev/shm, strict flag checking, running another benchmark tool
// (msg_bench, fabric_bench) for a reference measurement in the same run, keeping the cores out of
// idle for every target alike, and what each JSON line says about its run.
//
//   if (!FlagsAreValid("kvbench", argc, argv)) return 2;   // before absl::ParseCommandLine
//   RETURN_IF_ERROR(PinTo("0"));                            // this process and its children
//   ASSIGN_OR_RETURN(auto lines, RunTool("tools/fabric_bench", {"--sizes=2048", "--json"}));
//   ASSIGN_OR_RETURN(double p50, JsonNumber(lines[0], "p50_us"));
//   CoresAwake awake(true);                    // held for the whole run: every target alike
//   RunInfo info{"kvbench", seed, duration_ms, warmup_ms, awake.held()};
//   printf("{...%s}\n", RunInfoJson(info).c_str());   // ,"schema":2,"commit":...,"load_avg":...
//
// Thread safety: the functions are safe to call from any thread; PinTo and UsePrivateDevShm change
// the whole process and belong before any thread starts.
#ifndef FARM_TOOLS_BENCH_DRIVER_H_
#define FARM_TOOLS_BENCH_DRIVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace farm {

// A file shipped with this binary: in the runfiles (bazel run, bazel test), or beside it (e.g.
// rel "tools/msg_bench", beside_binary "msg_bench"). Empty when not found.
std::string FindRunfile(const std::string& rel, const std::string& beside_binary);

// "0-1", "0,2", "3": the CPUs listed. InvalidArgument names the entry at fault.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);
// Pins the calling process (and what it starts from now on) to the CPUs listed.
absl::Status PinTo(absl::string_view cpus);
// The CPUs this process may run on, "0,1".
std::string AffinityText();

// A private mount namespace whose /dev/shm is a fresh tmpfs, inherited by every child (root
// only): libfabric's shm provider names its files after process ids, and a stale file left by a
// killed process keeps a node that reuses its pid from starting.
absl::Status UsePrivateDevShm();

// Checks every flag on the command line before absl's parser (which exits 1 on an unknown flag):
// prints "<program>: ..." on standard error and returns false for an unknown flag, a missing
// value or a value of the wrong type.
bool FlagsAreValid(absl::string_view program, int argc, char** argv);

// Runs the tool shipped at runfile `rel` (found as FindRunfile(rel, basename)) with `args`, under
// `taskset -c cpus` when `cpus` is not empty, and returns its standard output's lines (its standard
// error is this process's). Internal error with the output when it fails.
absl::StatusOr<std::vector<std::string>> RunTool(const std::string& rel,
                                                 const std::vector<std::string>& args,
                                                 const std::string& cpus = "");

// The number after "key": in a flat JSON object line; NotFound when the key is not there.
absl::StatusOr<double> JsonNumber(absl::string_view line, absl::string_view key);

// Keeps every core of the machine out of idle states deeper than polling while it lives, through
// the kernel's PM QoS interface (0 written to /dev/cpu_dma_latency, held open; root only). A
// store that sleeps in epoll and a client that blocks in read would otherwise pay the wake-up of
// an idle core on every request while farm's spinning threads never do; held for the whole run,
// it treats every target alike. held() is false when the file cannot be written (why_not() says
// why).
class CoresAwake {
 public:
  // `want` false: held() false, nothing done.
  explicit CoresAwake(bool want);
  ~CoresAwake();
  CoresAwake(const CoresAwake&) = delete;
  CoresAwake& operator=(const CoresAwake&) = delete;
  bool held() const { return fd_ >= 0; }
  const std::string& why_not() const { return why_not_; }

 private:
  int fd_ = -1;
  std::string why_not_;
};

// VmRSS of process `pid` in bytes (/proc/PID/status): what a store holds resident.
absl::StatusOr<uint64_t> ResidentBytesOf(int pid);

// The machine's 1-minute load average (/proc/loadavg): how busy it was, other work included.
double LoadAverage();

// The checkout the tool runs in: `git describe --always --dirty` of the workspace (bazel run's
// BUILD_WORKSPACE_DIRECTORY, else the current directory), "unknown" outside a checkout. Under
// `bazel run`, which builds first, that is also what the binary was built from; a binary run
// directly from bazel-bin while the tree is being edited says "-dirty" whatever it was built
// from.
std::string SourceCommit();

// What every JSON line of a benchmark driver says about its run (schema version 2).
struct RunInfo {
  std::string tool;  // "kvbench", "txn_bench"
  uint64_t seed = 0;
  int duration_ms = 0, warmup_ms = 0;
  bool cores_awake = false;  // CoresAwake held for the whole run
};
constexpr int kBenchSchema = 2;
// ,"schema":2,"tool":..,"commit":..,"host":..,"seed":..,"duration_ms":..,"warmup_ms":..,
// "cores_awake":..,"load_avg":.. (the load average now): to append to a JSON object's members.
std::string RunInfoJson(const RunInfo& info);

}  // namespace farm

#endif  // FARM_TOOLS_BENCH_DRIVER_H_
