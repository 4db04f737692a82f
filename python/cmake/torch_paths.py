"""Writes the CMake settings of the PyTorch installed for this interpreter.

Run by python/CMakeLists.txt with the interpreter that builds the package:
prints `set(...)` lines for PyTorch's include directories, its library
directory, its C++ ABI flag, its version and whether it sees a CUDA device.
"""
import sys

try:
    import torch
    from torch.utils import cpp_extension
except ImportError as error:
    sys.exit(
        f"spattn: PyTorch is not importable by {sys.executable} ({error}). Install torch first "
        "and build with `pip install --no-build-isolation .` so the build sees it."
    )


def cmake_list(values):
    return ";".join(str(v).replace("\\", "/") for v in values)


print(f'set(TORCH_INCLUDE_DIRS "{cmake_list(cpp_extension.include_paths())}")')
print(f'set(TORCH_LIBRARY_DIR "{cmake_list(cpp_extension.library_paths()[:1])}")')
print(f"set(TORCH_CXX11_ABI {int(torch._C._GLIBCXX_USE_CXX11_ABI)})")
print(f'set(TORCH_VERSION "{torch.__version__}")')
print(f"set(TORCH_CUDA_DEVICE {int(torch.cuda.is_available())})")
