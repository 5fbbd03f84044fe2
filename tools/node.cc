// node: one symmetric cluster member with no application of its own. Serves its regions and RPC,
// joins through the configuration manager (hosting it when the configuration names this node),
// and runs until SIGINT/SIGTERM. The same main function (farm::RunNode) runs every cluster
// application; see farm.h for its flags and the status lines it prints for tools/cluster.
//
//   bazel run //tools:node -- --config=cluster.textproto --node_id=1
#include "farm/farm.h"

int main(int argc, char** argv) {
  farm::App node;
  node.name = "node";
  return farm::RunNode(argc, argv, node);
}
