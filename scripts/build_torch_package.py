#!/usr/bin/env python3
"""Builds the Python package `circlerope` (the pybind11 module `_core` and the operator library
libcirclerope_torch.so) against the torch this interpreter imports, without CMake's
find_package(Torch): include and library paths come from torch.utils.cpp_extension, the
compilers are called directly. The project's static libraries come from a CMake build tree
configured without torch (--libs), so this compiles three files only.

It exists for scripts/gpu_check.sh: a pip-installed torch's CMake config often fails where
its headers and libraries are fine (a CUDA toolkit that differs from the one torch was built
with, nvToolsExt missing from CUDA 12, no pybind11 CMake package). The C++ ABI flag is taken
from torch (`torch.compiled_with_cxx11_abi()`); the static libraries must have been built
with the same flag (gpu_check.sh configures them so).

    python3 scripts/build_torch_package.py --libs build/gpu --out build/gpu-package [--cuda]
    PYTHONPATH=build/gpu-package python3 -c "import circlerope"

ctest runs it against Debian's torch (no --cuda) and imports the result.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def run(cmd, log):
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write(done.stdout)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}) on {cmd[-1]}:\n{tail}")


def find_static(libs_dir, name):
    top = os.path.join(libs_dir, f"lib{name}.a")  # CMake puts them at the top of the tree
    if os.path.exists(top):
        return top
    found = glob.glob(os.path.join(libs_dir, "**", f"lib{name}.a"), recursive=True)
    if not found:
        raise RuntimeError(f"lib{name}.a is not in {libs_dir} (build the CMake tree first)")
    return found[0]


def torch_paths(cuda):
    from torch.utils import cpp_extension as ce
    for call in ((lambda: ce.include_paths(device_type="cuda" if cuda else "cpu")),
                 (lambda: ce.include_paths(cuda=cuda)),
                 (lambda: ce.include_paths(cuda))):
        try:
            includes = call()
            break
        except TypeError:  # the signature changed in torch 2.6 (cuda: bool -> device_type: str)
            continue
    for call in ((lambda: ce.library_paths(device_type="cuda" if cuda else "cpu")),
                 (lambda: ce.library_paths(cuda=cuda)),
                 (lambda: ce.library_paths(cuda))):
        try:
            libraries = call()
            break
        except TypeError:
            continue
    return includes, libraries, getattr(ce, "CUDA_HOME", None)


def project_version():
    text = open(os.path.join(SOURCE, "CMakeLists.txt")).read()
    return re.search(r"project\(circlerope VERSION ([0-9.]+)", text).group(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libs", required=True, help="CMake build tree holding libcirclerope*.a")
    parser.add_argument("--out", required=True, help="package root (gets circlerope/)")
    parser.add_argument("--cuda", action="store_true", help="with ops_cuda.cpp and libcirclerope_cuda.a")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    parser.add_argument("--extra-flags", default="", help="added to every compile and link (sanitizers)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--check", action="store_true",
                        help="then import the package in a fresh interpreter and rotate with it")
    parser.add_argument("--check-preload", default="", help="LD_PRELOAD for --check (sanitizer runtimes)")
    args = parser.parse_args()

    import torch
    includes, library_dirs, cuda_home = torch_paths(args.cuda)
    abi = int(torch.compiled_with_cxx11_abi())
    package = os.path.join(args.out, "circlerope")
    objects = os.path.join(args.out, "objects")
    os.makedirs(package, exist_ok=True)
    os.makedirs(objects, exist_ok=True)
    extra = args.extra_flags.split()
    common = ["-O2", "-fPIC", "-std=c++20", "-DNDEBUG", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"] + extra
    common += ["-I" + os.path.join(SOURCE, "include"), "-I" + os.path.join(SOURCE, "torch")]
    torch_includes = [f"-isystem{p}" for p in includes]
    cuda_includes = []
    if args.cuda:
        if not cuda_home:
            raise SystemExit("build_torch_package: --cuda but torch.utils.cpp_extension found no CUDA_HOME")
        cuda_includes = ["-isystem" + os.path.join(cuda_home, "include")]
    python_include = "-isystem" + sysconfig.get_paths()["include"]

    jobs = {  # object -> compile command
        "ops.o": [args.cxx] + common + torch_includes + ["-c", os.path.join(SOURCE, "torch", "ops.cpp")],
        "bindings.o": [args.cxx] + common + torch_includes + [python_include,
                       f'-DCIRCLEROPE_VERSION="{project_version()}"', "-c",
                       os.path.join(SOURCE, "python", "bindings.cpp")],
    }
    if args.cuda:
        jobs["ops_cuda.o"] = ([args.cxx] + common + torch_includes + cuda_includes +
                              ["-c", os.path.join(SOURCE, "torch", "ops_cuda.cpp")])
    log_path = os.path.join(args.out, "build.log")
    with open(log_path, "w") as log:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run, cmd + ["-o", os.path.join(objects, name)], log)
                       for name, cmd in jobs.items()]
            for f in futures:
                f.result()

        core = find_static(args.libs, "circlerope")
        kernels = find_static(args.libs, "circlerope_kernels")
        static = [kernels, core]
        link_torch = ["-lc10", "-ltorch", "-ltorch_cpu"]
        if args.cuda:
            static = [find_static(args.libs, "circlerope_cuda")] + static
            cudart = os.path.join(cuda_home, "lib64", "libcudart_static.a")
            if not os.path.exists(cudart):
                cudart = os.path.join(cuda_home, "lib", "libcudart_static.a")
            link_torch += ["-lc10_cuda", "-ltorch_cuda", cudart, "-ldl", "-lrt", "-lpthread"]
        rpath = [f"-Wl,-rpath,{d}" for d in library_dirs]
        lib_dirs = [f"-L{d}" for d in library_dirs]
        ops = [os.path.join(objects, "ops.o")] + ([os.path.join(objects, "ops_cuda.o")] if args.cuda else [])
        # the kernels library threads with OpenMP when CMake found it
        openmp = ["-fopenmp"]
        run([args.cxx, "-shared"] + extra + ops + static + lib_dirs + rpath + link_torch + openmp +
            ["-o", os.path.join(package, "libcirclerope_torch.so")], log)
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        run([args.cxx, "-shared"] + extra + [os.path.join(objects, "bindings.o"), core] +
            ["-o", os.path.join(package, "_core" + suffix)], log)
    for py in glob.glob(os.path.join(SOURCE, "python", "circlerope", "*.py")):
        shutil.copy(py, package)
    print(f"build_torch_package: {package} (torch {torch.__version__}, cxx11 abi {abi}, "
          f"{'cuda' if args.cuda else 'cpu'}); log {log_path}")
    if args.check:
        check(args.out, args.cuda, args.check_preload)


CHECK = """
import torch, circlerope
assert circlerope.__file__.startswith({root!r}), circlerope.__file__
assert circlerope.has_cuda_kernels() == {cuda}, circlerope.has_cuda_kernels()
ids = torch.tensor([[5, 151652] + [151655] * 4 + [151653, 6]])
pos, _ = circlerope.get_rope_index(ids, [[1, 4, 4]])
q, k = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
qo, ko = circlerope.apply_multimodal_rotary(q, k, pos, sections=(2, 3, 3), theta=1e4)
inv = 1e4 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
axes = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])
phi = (pos.double()[..., None] * inv).gather(0, axes.view(1, 1, 1, -1).expand(1, 1, 8, 8))[0][:, None]
for x, y in ((q, qo), (k, ko)):
    a, b = x.double()[..., :8], x.double()[..., 8:]
    want = torch.cat([a * phi.cos() - b * phi.sin(), b * phi.cos() + a * phi.sin()], -1)
    assert (y.double() - want).abs().max() < 1e-5
print("build_torch_package: the package imports and rotates")
"""


def check(root, cuda, preload):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(root))
    if preload:
        env.update(LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0")
    code = CHECK.format(root=os.path.abspath(root), cuda=cuda)
    # run from the package root: `python -c` puts the working directory first on sys.path,
    # where another circlerope (a CMake build's) may sit
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=os.path.abspath(root),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(done.stdout.strip())
    if done.returncode != 0:
        raise RuntimeError("the built package failed its check")


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:
        sys.exit(f"build_torch_package: {e}")
