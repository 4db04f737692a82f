# python/cmake/torch.cmake - finds the PyTorch of the interpreter that builds
# the Python package (scikit-build-core passes it as Python_EXECUTABLE) and
# sets TORCH_INCLUDE_DIRS, TORCH_LIBRARY_DIR, TORCH_CXX11_ABI, TORCH_VERSION
# and TORCH_CUDA_DEVICE. Included by the top-level CMakeLists.txt before the
# CUDA decision: with SPATTN_CUDA=AUTO the package builds CUDA code only where
# PyTorch sees a GPU, so CPU-only installs skip the CUDA kernels.
find_package(Python REQUIRED COMPONENTS Interpreter)
execute_process(
  COMMAND "${Python_EXECUTABLE}" "${CMAKE_CURRENT_LIST_DIR}/torch_paths.py"
  OUTPUT_FILE "${CMAKE_BINARY_DIR}/torch_paths.cmake"
  ERROR_VARIABLE torch_paths_error
  RESULT_VARIABLE torch_paths_status)
if(NOT torch_paths_status EQUAL 0)
  message(FATAL_ERROR "${torch_paths_error}")
endif()
include("${CMAKE_BINARY_DIR}/torch_paths.cmake")
message(STATUS "spattn: PyTorch ${TORCH_VERSION} (CUDA device: ${TORCH_CUDA_DEVICE})")
if(NOT TORCH_CXX11_ABI)
  message(FATAL_ERROR "spattn: PyTorch ${TORCH_VERSION} uses the pre-C++11 libstdc++ ABI; "
                      "the package needs a PyTorch built with the C++11 ABI (2.6 or newer on PyPI)")
endif()
if(SPATTN_CUDA STREQUAL "AUTO" AND NOT TORCH_CUDA_DEVICE)
  set(SPATTN_CUDA OFF)
endif()
