"""CUDA sources: nvcc compiles .cu files into an object for a cc_library.

Targets made with these macros exist only with --config=cuda; a plain
`bazel build //...` skips them as incompatible rather than failing.
"""

CUDA_ONLY = select({
    "//bazel:cuda_enabled": [],
    "//conditions:default": ["//bazel:cuda_unavailable"],
})

def cuda_library(name, srcs, hdrs = [], deps = [], visibility = None):
    """A cc_library whose .cu sources are compiled by nvcc (sm_90 + PTX)."""
    objs = []
    for s in srcs:
        obj = name + "_" + s.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [s] + hdrs,
            outs = [obj],
            tools = ["@cuda//:nvcc"],
            cmd = " ".join([
                "$(location @cuda//:nvcc)",
                "-std=c++20",
                "-O3",
                "-Xcompiler=-fPIC,-Wall,-Wextra,-Werror",
                "-gencode=arch=compute_90,code=sm_90",
                "-gencode=arch=compute_90,code=compute_90",
                "-I.",
                "-c $(location " + s + ")",
                "-o $@",
            ]),
            target_compatible_with = CUDA_ONLY,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        linkstatic = True,
        target_compatible_with = CUDA_ONLY,
        visibility = visibility,
    )
