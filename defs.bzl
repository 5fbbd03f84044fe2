"""Bazel macros for farm cluster applications."""

def farm_app(name, srcs, deps = [], **kwargs):
    """A cluster application and a target that launches a local cluster of it.

    Defines `name`, a cc_binary linking //:farm (its main calls farm::RunNode), and
    `name + "_cluster"`, which runs //tools:cluster with --node_binary set to it:

        bazel run //examples:hello_cluster -- --nodes=3 --provider=shm

    Extra arguments go to //tools:cluster (see its --help).
    """
    native.cc_binary(
        name = name,
        srcs = srcs,
        deps = deps + ["//:farm"],
        **kwargs
    )
    native.sh_binary(
        name = name + "_cluster",
        srcs = ["//tools:run_app_cluster.sh"],
        args = [
            "$(rootpath //tools:cluster)",
            "$(rootpath :%s)" % name,
        ],
        data = [
            "//tools:cluster",
            ":" + name,
        ],
    )
