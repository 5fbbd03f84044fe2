// hello: the smallest farm cluster application, and the one the README starts with.
//
// Every node
//  1. writes a greeting into its own memory (the first bytes of its first region) during setup,
//     before it can be reached;
//  2. calls every node (itself included) with an RPC, which also tells it that the callee has
//     finished its setup;
//  3. reads every other node's greeting with a one-sided READ and prints it.
//
//   bazel run //examples:hello_cluster -- --nodes=3 --provider=shm
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "farm/farm.h"

namespace {

constexpr uint16_t kHello = 1;
constexpr uint64_t kGreetingBytes = 64;  // at offset 0 of each node's first region

absl::Status WriteGreeting(farm::Runtime& rt) {
  const std::vector<farm::RegionRef> mine = rt.Regions(rt.node_id());
  if (mine.empty()) return absl::FailedPreconditionError("this node has no region");
  absl::StatusOr<absl::Span<char>> at = rt.Local(mine[0].base(), kGreetingBytes);
  if (!at.ok()) return at.status();
  const std::string greeting =
      absl::StrCat("hello from node ", rt.node_id(), " (pid ", getpid(), ")");
  std::memset(at->data(), 0, at->size());
  std::memcpy(at->data(), greeting.data(), std::min<size_t>(greeting.size(), at->size() - 1));
  return absl::OkStatus();
}

absl::Status Setup(farm::Runtime& rt) {
  if (absl::Status s = WriteGreeting(rt); !s.ok()) return s;
  const uint32_t self = rt.node_id();
  return rt.Handle(kHello, [self](const farm::Request& r) -> absl::StatusOr<std::string> {
    return absl::StrCat("node ", self, " says hi to node ", r.from, " (", r.payload, ")");
  });
}

absl::Status Run(farm::Runtime& rt) {
  absl::StatusOr<std::unique_ptr<farm::Worker>> w = rt.NewWorker();
  if (!w.ok()) return w.status();
  for (uint32_t peer : rt.members()) {
    absl::StatusOr<std::string> answer = (*w)->Call(peer, kHello, "how are you?");
    if (!answer.ok()) return answer.status();
    std::printf("node %u called node %u: \"%s\"\n", rt.node_id(), peer, answer->c_str());
  }
  for (uint32_t peer : rt.members()) {
    if (peer == rt.node_id()) continue;
    const std::vector<farm::RegionRef> theirs = rt.Regions(peer);
    if (theirs.empty())
      return absl::FailedPreconditionError(absl::StrCat("node ", peer, " has no region"));
    char greeting[kGreetingBytes] = {};
    if (absl::Status s = (*w)->Read(theirs[0].base(), greeting, sizeof(greeting)); !s.ok())
      return s;
    greeting[sizeof(greeting) - 1] = '\0';
    std::printf("node %u read node %u's greeting with a one-sided READ: \"%s\"\n", rt.node_id(),
                peer, greeting);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  farm::App app;
  app.name = "hello";
  app.setup = Setup;
  app.run = Run;
  return farm::RunNode(argc, argv, app);
}
