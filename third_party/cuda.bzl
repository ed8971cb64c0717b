"""A repository for the CUDA runtime and NCCL, rooted at HERD_CUDA.

HERD_CUDA (default /usr/local/cuda) may be
  * a CUDA toolkit: include/cuda_runtime.h, lib64/ or lib/ with libcudart.so*,
    and usually include/nccl.h with libnccl.so* beside it;
  * the `nvidia` folder of pip's nvidia-* wheels (site-packages/nvidia): the
    runtime is taken from its cu13/, cu12/ or cuda_runtime/ subfolder and NCCL
    from its nccl/ subfolder.
The runtime headers need crt/ and nv/, which a layout may keep apart from
cuda_runtime.h (pip's wheels lack both, a CUDA 13 toolkit has nv/ under
include/cccl/): they are looked for beside it, under include/cccl/, in the
sibling folders of HERD_CUDA and in /usr/local/cuda, and linked in.
HERD_NCCL_ROOT (optional) names NCCL's own root (include/nccl.h, lib/libnccl.so*)
when it lives elsewhere. Wheels ship only versioned libraries (libnccl.so.2),
so those are linked by file name.

The repository always defines the same targets:
  @cuda//:cuda_runtime, @cuda//:nccl   cc_libraries (headers + link flags)
  @cuda//:config                       "herd_cuda/config.h": roots and, when
                                       NCCL is missing, why
  @cuda//:nccl_available               config_setting: NCCL was found
  @cuda//:have_nccl                    its flag; --@cuda//:have_nccl=false
                                       builds the stub even where NCCL exists
When NCCL is missing (or too old) the libraries are empty and nccl_available
is false, so //worker/comm:nccl_communicator builds its stub, whose factory
returns UNIMPLEMENTED with the reason. That select is herd's one build-time
switch for NCCL.
"""

# Non-blocking communicators (ncclConfig_t.blocking) arrived in NCCL 2.14.
_MIN_NCCL = (2, 14)

# Header folders herd never includes: skipping them keeps thousands of
# headers (CCCL, Thrust, CUB, libcu++) out of every compile action.
_SKIP_HEADER_DIRS = ["cccl", "cub", "thrust", "cuda", "Openacc", "Openmp", "nccl_device"]

_LIB_DIRS = ["lib64", "lib", "targets/x86_64-linux/lib"]

def _exists(ctx, path):
    return ctx.path(path).exists

def _find_runtime_root(ctx, root):
    for candidate in [root, root + "/cu13", root + "/cu12", root + "/cuda_runtime"]:
        if _exists(ctx, candidate + "/include/cuda_runtime.h"):
            return candidate
    return None

def _find_nccl_root(ctx, root, runtime_root):
    candidates = [root, root + "/nccl"]
    if runtime_root:
        candidates = [runtime_root] + candidates
    for candidate in candidates:
        if _exists(ctx, candidate + "/include/nccl.h"):
            return candidate
    return None

def _find_library(ctx, root, name):
    """Returns (folder, -l flag) for lib<name>.so, else its newest lib<name>.so.N."""
    for sub in _LIB_DIRS:
        folder = root + "/" + sub
        if not _exists(ctx, folder):
            continue
        if _exists(ctx, folder + "/lib%s.so" % name):
            return folder, "-l" + name
        versioned = sorted([
            entry.basename
            for entry in ctx.path(folder).readdir()
            if entry.basename.startswith("lib%s.so." % name)
        ])
        if versioned:
            return folder, "-l:" + versioned[-1]
    return None, None

def _nccl_version(ctx, header):
    """(major, minor) parsed from nccl.h, or None."""
    major = None
    minor = None
    for line in ctx.read(header).splitlines():
        parts = [part for part in line.replace("\t", " ").split(" ") if part]
        if len(parts) == 3 and parts[0] == "#define" and parts[2].isdigit():
            if parts[1] == "NCCL_MAJOR":
                major = int(parts[2])
            elif parts[1] == "NCCL_MINOR":
                minor = int(parts[2])
    if major == None or minor == None:
        return None
    return (major, minor)

def _link_headers(ctx, include_dir, dest, keep):
    """Symlinks the entries of include_dir for which keep(name) is true."""
    for entry in ctx.path(include_dir).readdir():
        if keep(entry.basename):
            ctx.symlink(entry, dest + "/" + entry.basename)

# Headers the runtime's own headers include that some layouts keep elsewhere:
# pip's nvidia/cu13/include has neither crt/ nor nv/ (cuda_runtime.h needs
# crt/host_config.h, cuda_fp16.h needs <nv/target>); CUDA 13 toolkits keep
# nv/ with the rest of CCCL under include/cccl/.
_SIDE_HEADERS = {"crt": "host_config.h", "nv": "target"}

def _side_header_dirs(ctx, root, runtime_root):
    """The include folders searched for crt/ and nv/, nearest first."""
    dirs = [runtime_root + "/include", runtime_root + "/include/cccl"]
    if _exists(ctx, root):
        # Sibling wheels of a pip layout (nvidia/cuda_nvcc, nvidia/cuda_cccl, ...).
        for entry in ctx.path(root).readdir():
            dirs += [str(entry) + "/include", str(entry) + "/include/cccl"]
    dirs += ["/usr/local/cuda/include", "/usr/local/cuda/include/cccl"]
    return dirs

def _find_side_headers(ctx, root, runtime_root):
    """{name: folder holding name/} for crt and nv, and the names not found."""
    found = {}
    missing = []
    dirs = _side_header_dirs(ctx, root, runtime_root)
    for name, probe in _SIDE_HEADERS.items():
        for folder in dirs:
            if _exists(ctx, folder + "/" + name + "/" + probe):
                found[name] = folder + "/" + name
                break
        if name not in found:
            missing.append("%s/%s" % (name, probe))
    return found, missing

def _is_runtime_header(name):
    # crt/ and nv/ are linked from wherever _find_side_headers found them.
    return name not in _SKIP_HEADER_DIRS and name not in _SIDE_HEADERS and not name.startswith("nccl")

def _is_nccl_header(name):
    return name == "nccl.h"

def _link_flags(folder, flag):
    return ["-L" + folder, "-Wl,-rpath," + folder, flag]

def _c_string(value):
    return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')

def _cuda_impl(ctx):
    root = ctx.os.environ.get("HERD_CUDA", "/usr/local/cuda")
    nccl_override = ctx.os.environ.get("HERD_NCCL_ROOT", "")
    where = "HERD_CUDA=" + root

    runtime_flags = []
    nccl_flags = []
    runtime_root = None
    nccl_root = None
    reason = ""

    if not _exists(ctx, root):
        reason = "%s does not exist" % where
    else:
        runtime_root = _find_runtime_root(ctx, root)
        if runtime_root == None:
            reason = "no include/cuda_runtime.h under %s (nor its cu13/, cu12/ or cuda_runtime/ folders)" % where
        else:
            folder, flag = _find_library(ctx, runtime_root, "cudart")
            if folder == None:
                reason = "no libcudart.so* under %s/{%s}" % (runtime_root, ",".join(_LIB_DIRS))
                runtime_root = None
            else:
                side, missing = _find_side_headers(ctx, root, runtime_root)
                if missing:
                    reason = "no %s beside %s/include (looked in include/, include/cccl/, the sibling folders of %s and /usr/local/cuda)" % (
                        " or ".join(missing),
                        runtime_root,
                        root,
                    )
                    runtime_root = None
                else:
                    runtime_flags = _link_flags(folder, flag)
                    _link_headers(ctx, runtime_root + "/include", "cuda/include", _is_runtime_header)
                    for name, path in side.items():
                        ctx.symlink(path, "cuda/include/" + name)

    if runtime_root != None:
        if nccl_override:
            where = "HERD_NCCL_ROOT=" + nccl_override
            nccl_root = nccl_override if _exists(ctx, nccl_override + "/include/nccl.h") else None
        else:
            nccl_root = _find_nccl_root(ctx, root, runtime_root)
        if nccl_root == None:
            reason = "no nccl.h under %s" % where
        else:
            version = _nccl_version(ctx, nccl_root + "/include/nccl.h")
            folder, flag = _find_library(ctx, nccl_root, "nccl")
            if version == None or version < _MIN_NCCL:
                reason = "%s/include/nccl.h is NCCL %s; herd needs %d.%d or newer" % (
                    nccl_root,
                    "%d.%d" % version if version else "of unknown version",
                    _MIN_NCCL[0],
                    _MIN_NCCL[1],
                )
                nccl_root = None
            elif folder == None:
                reason = "no libnccl.so* under %s/{%s}" % (nccl_root, ",".join(_LIB_DIRS))
                nccl_root = None
            else:
                nccl_flags = _link_flags(folder, flag)
                _link_headers(ctx, nccl_root + "/include", "nccl/include", _is_nccl_header)

    have_nccl = nccl_root != None
    ctx.file("herd_cuda/config.h", """// Generated by //third_party:cuda.bzl: what the build found under HERD_CUDA.
#pragma once

namespace herd_cuda_config {{

inline constexpr bool kHaveNccl = {have_nccl};
inline constexpr char kCudaRoot[] = {cuda_root};
inline constexpr char kNcclRoot[] = {nccl_root};
// Empty when NCCL was found; otherwise why not, e.g. "no nccl.h under HERD_CUDA=/x".
inline constexpr char kNcclUnavailableReason[] = {reason};

}}  // namespace herd_cuda_config
""".format(
        have_nccl = "true" if have_nccl else "false",
        cuda_root = _c_string(runtime_root or root),
        nccl_root = _c_string(nccl_root or ""),
        reason = _c_string(reason),
    ))

    ctx.file("flag.bzl", """
def _bool_flag_impl(ctx):
    return []

bool_flag = rule(implementation = _bool_flag_impl, build_setting = config.bool(flag = True))
""")

    ctx.file("BUILD", """load(":flag.bzl", "bool_flag")

package(default_visibility = ["//visibility:public"])

# {summary}
bool_flag(
    name = "have_nccl",
    build_setting_default = {have_nccl},
)

config_setting(
    name = "nccl_available",
    flag_values = {{":have_nccl": "true"}},
)

cc_library(
    name = "cuda_runtime",
    hdrs = glob(["cuda/include/**"], allow_empty = True),
    includes = ["cuda/include"],
    linkopts = {runtime_flags},
)

cc_library(
    name = "nccl",
    hdrs = glob(["nccl/include/**"], allow_empty = True),
    includes = ["nccl/include"],
    linkopts = {nccl_flags},
    deps = [":cuda_runtime"],
)

cc_library(
    name = "config",
    hdrs = ["herd_cuda/config.h"],
)
""".format(
        summary = ("NCCL from " + nccl_root) if have_nccl else ("NCCL unavailable: " + reason),
        have_nccl = "True" if have_nccl else "False",
        runtime_flags = repr(runtime_flags),
        nccl_flags = repr(nccl_flags),
    ))

cuda_repository = repository_rule(
    implementation = _cuda_impl,
    environ = ["HERD_CUDA", "HERD_NCCL_ROOT"],
    local = True,
)
