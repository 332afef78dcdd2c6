"""Compiles .proto files with Debian's protoc and grpc_cpp_plugin.

Bazel 4's native proto rules would download protobuf; this macro calls the
system compilers from a genrule instead and links the system libraries.
"""

def shardd_grpc_library(name, srcs, deps = [], proto_root = "", visibility = None):
    """A cc_library holding the messages and gRPC stubs of `srcs`.

    Args:
      name: target name.
      srcs: .proto files, relative to this package.
      deps: other shardd_grpc_library targets whose protos `srcs` import.
      proto_root: directory (relative to this package) that import paths are
        relative to; generated headers are included by the same path.
      visibility: visibility of the cc_library.
    """
    pkg = native.package_name()
    root = pkg + ("/" + proto_root if proto_root else "")
    rel = [s[len(proto_root) + 1:] if proto_root else s for s in srcs]
    prefix = (proto_root + "/") if proto_root else ""
    hdrs = []
    cc_srcs = []
    for r in rel:
        base = r[:-len(".proto")]
        hdrs += [prefix + base + ".pb.h", prefix + base + ".grpc.pb.h"]
        cc_srcs += [prefix + base + ".pb.cc", prefix + base + ".grpc.pb.cc"]

    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_protos" for d in deps],
        outs = hdrs + cc_srcs,
        cmd = " ".join([
            "protoc",
            "--proto_path=" + root,
            "--cpp_out=$(GENDIR)/" + root,
            "--grpc_out=$(GENDIR)/" + root,
            "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)",
        ] + ["$(location " + s + ")" for s in srcs]),
    )
    native.filegroup(
        name = name + "_protos",
        srcs = srcs,
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
