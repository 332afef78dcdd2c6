"""Compiles .proto files with Debian's protoc and grpc_cpp_plugin.

Bazel 4's native proto rules would download protobuf; this macro calls the
system compilers from a small rule instead and links the system libraries.
"""

ShardProtoInfo = provider(
    doc = "The .proto files of a shardd_grpc_library and of its deps.",
    fields = {
        "srcs": "depset of the .proto files, transitively",
        "roots": "depset of proto roots (execroot-relative), transitively",
    },
)

def _join(parts):
    return "/".join([p for p in parts if p]) or "."

def _protoc_impl(ctx):
    label = ctx.label
    root = _join([label.workspace_root, label.package, ctx.attr.proto_root])
    deps = [d[ShardProtoInfo] for d in ctx.attr.deps]
    srcs = depset(ctx.files.srcs, transitive = [d.srcs for d in deps])
    roots = depset(
        [root],
        transitive = [d.roots for d in deps],
        order = "preorder",
    )

    # Outputs go to this package's output directory, under proto_root.
    out_dir = _join([
        ctx.bin_dir.path,
        label.workspace_root,
        label.package,
        ctx.attr.proto_root,
    ])
    args = ["--proto_path=" + r for r in roots.to_list()] + [
        "--cpp_out=" + out_dir,
        "--grpc_out=" + out_dir,
        "--plugin=protoc-gen-grpc=$(command -v grpc_cpp_plugin)",
    ] + [f.path for f in ctx.files.srcs]
    ctx.actions.run_shell(
        inputs = srcs,
        outputs = ctx.outputs.outs,
        command = "protoc " + " ".join(args),
        mnemonic = "ShardProtoc",
        progress_message = "Compiling protos of %s" % ctx.label,
        use_default_shell_env = True,
    )
    return [
        DefaultInfo(files = depset(ctx.outputs.outs)),
        ShardProtoInfo(srcs = srcs, roots = roots),
    ]

_shardd_protoc = rule(
    implementation = _protoc_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".proto"]),
        "deps": attr.label_list(providers = [ShardProtoInfo]),
        "proto_root": attr.string(),
        "outs": attr.output_list(),
    },
)

def _gen_label(dep):
    """The protoc target of a shardd_grpc_library label."""
    if ":" not in dep:
        # "//a/b" is short for "//a/b:b".
        dep = dep + ":" + dep.split("/")[-1]
    return dep + "_gen"

def shardd_grpc_library(
        name,
        srcs,
        deps = [],
        proto_root = "",
        visibility = None):
    """A cc_library holding the messages and gRPC stubs of `srcs`.

    Args:
      name: target name.
      srcs: .proto files, relative to this package, under proto_root.
      deps: other shardd_grpc_library targets whose protos `srcs` import
        (in any package, with any proto_root; imports resolve transitively).
      proto_root: directory (relative to this package) that import paths are
        relative to; generated headers are included by the same path.
      visibility: visibility of the cc_library (and of its protoc target).
    """
    prefix = (proto_root + "/") if proto_root else ""
    for s in srcs:
        if not s.endswith(".proto") or not s.startswith(prefix):
            fail("%s: %s is not a .proto file under proto_root '%s'" %
                 (name, s, proto_root))

    hdrs = []
    cc_srcs = []
    for s in srcs:
        base = s[:-len(".proto")]
        hdrs += [base + ".pb.h", base + ".grpc.pb.h"]
        cc_srcs += [base + ".pb.cc", base + ".grpc.pb.cc"]

    _shardd_protoc(
        name = name + "_gen",
        srcs = srcs,
        deps = [_gen_label(d) for d in deps],
        proto_root = proto_root,
        outs = hdrs + cc_srcs,
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = cc_srcs,
        hdrs = hdrs,
        includes = [proto_root] if proto_root else ["."],
        deps = deps + [
            "@system_libs//:grpc",
            "@system_libs//:protobuf",
        ],
        visibility = visibility,
    )
