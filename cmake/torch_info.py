"""Prints what CMake needs from the torch that `python` imports, one `key=value` a line:
version, the C++ ABI flag, include and library directories, whether it has CUDA, and the
pybind11 CMake directory when pybind11 is installed. Run by CMakeLists.txt (circlerope_find_torch)."""
import sys

try:
    import torch
    from torch.utils import cpp_extension
except ImportError as e:  # CMake prints this line as the reason
    print(f"error={type(e).__name__}: {e}")
    sys.exit(0)


def paths(function):
    # include_paths/library_paths took `cuda: bool` before torch 2.6, `device_type: str` after
    for call in (lambda: function(device_type="cpu"), lambda: function(cuda=False), lambda: function()):
        try:
            return call()
        except TypeError:
            continue
    return []


print(f"version={torch.__version__.split('+')[0]}")
print(f"full_version={torch.__version__}")
print(f"cxx11_abi={int(torch.compiled_with_cxx11_abi())}")
print("include_dirs=" + "|".join(paths(cpp_extension.include_paths)))
print("library_dirs=" + "|".join(paths(cpp_extension.library_paths)))
print(f"cuda={torch.version.cuda or ''}")
print(f"python_file={torch.__file__}")
try:
    import pybind11
    print(f"pybind11_dir={pybind11.get_cmake_dir()}")
except ImportError:
    pass
