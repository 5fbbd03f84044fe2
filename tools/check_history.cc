// check_history: checks a recorded history of transactions for strict serializability.
//
//   bazel run //tools:check_history -- --history=/tmp/history.jsonl
//   some_workload | check_history --history=-
//
// The file holds one transaction per line (the format is described in txn/history.h):
//   {"client":3,"start":100,"end":250,"outcome":"committed","ops":[["r",7,0],["w",7,11,0]]}
// Prints "OK: N transactions, strictly serializable" and exits 0, or prints the anomalies found
// (kind, the cycle's edges, the transactions with their line numbers) and exits 1. Bad input
// (unreadable file, malformed line, a value written twice to one key, ...) exits 2.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "platform/logging.h"
#include "spdlog/spdlog.h"
#include "txn/history.h"

ABSL_FLAG(std::string, history, "", "history file (JSON lines), or - for standard input");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off");

namespace farm {
namespace {

using txn::Anomaly;
using txn::CheckStrictSerializability;
using txn::History;
using txn::HistoryCheck;
using txn::ParseHistoryJsonLines;

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open " + path);
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError("cannot read " + path);
  return text.str();
}

int Main() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "check_history"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  const std::string path = absl::GetFlag(FLAGS_history);
  if (path.empty()) {
    spdlog::error("--history is required (a file, or - for standard input)");
    return 2;
  }
  absl::StatusOr<std::string> text = ReadAll(path);
  if (!text.ok()) {
    spdlog::error("{}", std::string(text.status().message()));
    return 2;
  }
  absl::StatusOr<History> history = ParseHistoryJsonLines(*text);
  if (!history.ok()) {
    spdlog::error("{}: {}", path, std::string(history.status().message()));
    return 2;
  }
  absl::StatusOr<HistoryCheck> check = CheckStrictSerializability(*history);
  if (!check.ok()) {
    spdlog::error("{}: bad history: {}", path, std::string(check.status().message()));
    return 2;
  }
  spdlog::info(
      "{} transactions: {} committed ({} of unknown outcome, observed), {} aborted, {} "
      "of unknown outcome dropped (unobserved)",
      check->transactions, check->committed, check->unknown_included, check->aborted,
      check->unknown_dropped);
  if (check->ok()) {
    std::printf("OK: %zu transactions, strictly serializable\n", check->transactions);
    return 0;
  }
  std::printf("NOT strictly serializable: %zu anomal%s in %zu transactions\n", check->anomaly_count,
              check->anomaly_count == 1 ? "y" : "ies", check->transactions);
  for (const Anomaly& a : check->anomalies) std::printf("%s\n", a.description.c_str());
  if (check->anomaly_count > check->anomalies.size()) {
    std::printf("(%zu more not shown)\n", check->anomaly_count - check->anomalies.size());
  }
  return 1;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Checks a history of transactions (JSON lines, see txn/history.h) for strict "
      "serializability.\n"
      "  check_history --history=FILE   exit 0: strictly serializable, 1: anomaly, 2: bad input");
  absl::ParseCommandLine(argc, argv);
  return farm::Main();
}
