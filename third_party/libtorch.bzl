"""A repository for LibTorch whose root is chosen by the HERD_LIBTORCH variable.

Debian's libtorch-dev lives under /usr (headers in /usr/include, libraries in
/usr/lib/x86_64-linux-gnu); a pip-installed PyTorch keeps both under its
`torch` package folder (include/ and lib/). The rule links the header folders
into the repository and emits one cc_library, so the same BUILD files build
against either, a CUDA-enabled pip LibTorch included.
"""

_HEADER_DIRS = ["torch", "ATen", "c10", "caffe2"]

def _libtorch_impl(ctx):
    root = ctx.os.environ.get("HERD_LIBTORCH", "/usr")
    api = ctx.path(root + "/include/torch/csrc/api/include")
    if not api.exists:
        fail("HERD_LIBTORCH=%s has no include/torch/csrc/api/include; point it at /usr (Debian libtorch-dev) or a pip torch package folder" % root)
    for d in _HEADER_DIRS:
        p = ctx.path(root + "/include/" + d)
        if p.exists:
            ctx.symlink(p, "include/" + d)

    libdir = root + "/lib/x86_64-linux-gnu"
    if not ctx.path(libdir + "/libtorch.so").exists:
        libdir = root + "/lib"
    libs = ["torch", "torch_cpu", "c10"]
    cuda = ctx.path(libdir + "/libtorch_cuda.so").exists
    if cuda:
        libs = ["torch", "torch_cuda", "torch_cpu", "c10_cuda", "c10"]
    linkopts = ["-L" + libdir, "-Wl,-rpath," + libdir, "-Wl,--no-as-needed"]
    linkopts += ["-l" + l for l in libs]
    linkopts += ["-Wl,--as-needed"]

    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    linkopts = {linkopts},
    defines = {defines},
)
""".format(
        linkopts = repr(linkopts),
        defines = repr(["HERD_LIBTORCH_CUDA=1"] if cuda else []),
    ))

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    environ = ["HERD_LIBTORCH"],
    local = True,
)
