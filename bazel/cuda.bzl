"""CUDA sources: nvcc compiles .cu files into an object for a cc_library.

Targets made with these macros exist only with --config=cuda; a plain
`bazel build //...` skips them as incompatible rather than failing.
"""

CUDA_ONLY = select({
    "//bazel:cuda_enabled": [],
    "//conditions:default": ["//bazel:cuda_unavailable"],
})

def cuda_library(name, srcs, hdrs = [], nvcc_hdrs = [], deps = [], visibility = None):
    """A cc_library whose .cu sources are compiled by nvcc (sm_90 + PTX).

    Args:
      name: target name.
      srcs: .cu files.
      hdrs: this library's headers (nvcc sees them too).
      nvcc_hdrs: other headers the .cu files include (labels of files); they
        must not pull in host-only libraries nvcc cannot parse.
      deps: cc_library deps for the host side.
      visibility: visibility.
    """
    objs = []
    for s in srcs:
        obj = name + "_" + s.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [s] + hdrs + nvcc_hdrs,
            outs = [obj],
            cmd = " ".join([
                # The toolkit is used in place: nvcc finds its headers, nvvm and
                # libraries relative to itself, which a sandbox of declared
                # inputs would not hold.
                "/usr/local/cuda/bin/nvcc",
                "-std=c++20",
                "-O3",
                # IEEE division and square root, no fused multiply-add: kernels
                # must round exactly like their CPU twins.
                "--fmad=false",
                "-prec-div=true",
                "-prec-sqrt=true",
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
