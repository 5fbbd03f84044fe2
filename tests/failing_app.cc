// A cluster application whose node 1 fails (for app_test.sh): the others must still finish and
// leave, and the cluster must report the failure.
#include "absl/strings/str_cat.h"
#include "farm/farm.h"

int main(int argc, char** argv) {
  farm::App app;
  app.name = "failing";
  app.run = [](farm::Runtime& rt) -> absl::Status {
    if (rt.node_id() == 1) return absl::InternalError("node 1 fails on purpose");
    return absl::OkStatus();
  };
  return farm::RunNode(argc, argv, app);
}
