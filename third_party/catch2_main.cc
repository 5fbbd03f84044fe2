// main() of every Catch2 test: Catch2 v2.13's runner without its POSIX signal handlers, and
// with Abseil's failure signal handler instead.
//
// Catch's handler reports a fatal signal through its reporter, which allocates. A crash inside
// malloc (heap corruption found by free, say) holds the allocator's lock, so the report
// deadlocked and the test hung until its time limit with no hint of the crash. Abseil's handler
// allocates nothing, prints the faulting thread's stack and the test case that was running, and
// ends the process with the signal (an alarm ends it if the handler itself gets stuck).
// Under the sanitizers (ASan, TSan) their runtimes' own handlers report the crash instead.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FARM_TEST_SANITIZER 1
#else
#define FARM_TEST_SANITIZER 0
#endif

namespace {

// The running test case's name, for the crash report (written by the test thread, read by the
// signal handler: a fixed buffer, no allocation).
char current_test[512] = "(none yet)";

class CurrentTestCase : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    const size_t n = std::min(info.name.size(), sizeof(current_test) - 1);
    std::memcpy(current_test, info.name.data(), n);
    current_test[n] = '\0';
  }
};

void WriteStderr(const char* s) {
  for (size_t left = std::strlen(s); left > 0;) {
    const ssize_t n = write(STDERR_FILENO, s, left);
    if (n <= 0) return;
    s += n;
    left -= static_cast<size_t>(n);
  }
}

// Abseil's handler writes its report to stderr, then once more through this writer (which also
// gets nullptr at the end): here only the test case is added.
void WriteTestCase(const char* data) {
  static bool named = false;
  if (data == nullptr || named) return;
  named = true;
  WriteStderr("*** the fatal signal came during test case: ");
  WriteStderr(current_test);
  WriteStderr("\n");
}

}  // namespace

CATCH_REGISTER_LISTENER(CurrentTestCase)

int main(int argc, char** argv) {
  if (!FARM_TEST_SANITIZER) {
    absl::InitializeSymbolizer(argv[0]);
    absl::FailureSignalHandlerOptions options;
    options.writerfn = WriteTestCase;
    absl::InstallFailureSignalHandler(options);
  }
  return Catch::Session().run(argc, argv);
}
