// Process-level helpers of the benchmark drivers (txn_bench, kvbench): files shipped beside the
// binary, CPU pinning, a private /dev/shm, strict flag checking, and running another benchmark
// tool (msg_bench, fabric_bench) for a reference measurement in the same run.
//
//   if (!FlagsAreValid("kvbench", argc, argv)) return 2;   // before absl::ParseCommandLine
//   RETURN_IF_ERROR(PinTo("0"));                            // this process and its children
//   ASSIGN_OR_RETURN(auto lines, RunTool("tools/fabric_bench", {"--sizes=2048", "--json"}));
//   ASSIGN_OR_RETURN(double p50, JsonNumber(lines[0], "p50_us"));
//
// Thread safety: the functions are safe to call from any thread; PinTo and UsePrivateDevShm change
// the whole process and belong before any thread starts.
#ifndef FARM_TOOLS_BENCH_DRIVER_H_
#define FARM_TOOLS_BENCH_DRIVER_H_

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

}  // namespace farm

#endif  // FARM_TOOLS_BENCH_DRIVER_H_
