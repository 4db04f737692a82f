# cmake/nccl.cmake - finds NCCL for the context-parallel NCCL transport
# (src/dist/nccl_transport.cpp) and sets SPATTN_HAVE_NCCL, NCCL_INCLUDE_DIR and
# NCCL_LIBRARY. SPATTN_NCCL: AUTO (use it where found), ON (required), OFF.
# Looked for under NCCL_ROOT (a CMake or environment variable), then in the
# NVIDIA wheel that PyTorch installs (nvidia/nccl of the project's .venv or of
# the Python found on the PATH), then in the system's paths.
set(SPATTN_HAVE_NCCL OFF)
if(SPATTN_NCCL STREQUAL "OFF" OR NOT SPATTN_HAVE_CUDA)
  if(SPATTN_NCCL STREQUAL "ON")
    message(FATAL_ERROR "SPATTN_NCCL=ON needs the CUDA backend")
  endif()
  return()
endif()
set(nccl_hints "")
foreach(root "${NCCL_ROOT}" "$ENV{NCCL_ROOT}")
  if(root)
    list(APPEND nccl_hints "${root}")
  endif()
endforeach()
set(nccl_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
if(NOT EXISTS "${nccl_python}")
  find_program(nccl_python NAMES python3 python)
endif()
if(nccl_python)
  execute_process(
    COMMAND "${nccl_python}" -c "import nvidia.nccl as n; print(list(n.__path__)[0])"
    OUTPUT_VARIABLE nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE nccl_wheel_status)
  if(nccl_wheel_status EQUAL 0 AND nccl_wheel)
    list(APPEND nccl_hints "${nccl_wheel}")
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${nccl_hints} PATH_SUFFIXES include)
# The wheel ships libnccl.so.2 without the libnccl.so link.
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${nccl_hints} PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(SPATTN_HAVE_NCCL ON)
elseif(SPATTN_NCCL STREQUAL "ON")
  message(FATAL_ERROR "SPATTN_NCCL=ON but nccl.h / libnccl were not found; set NCCL_ROOT")
endif()
message(STATUS "spattn: NCCL transport ${SPATTN_HAVE_NCCL} ${NCCL_LIBRARY}")
