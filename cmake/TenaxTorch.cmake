# Finds libtorch the way tenax builds against it: the libtorch inside PyTorch's wheel, located
# through a Python interpreter that imports torch. On development and CI machines that is
# scripts/setup's .deps/venv (torch from PyPI, with the CUDA toolkit's pieces and NCCL as wheels);
# on a GPU machine it is whatever `python3` has torch (pass -DTENAX_PYTHON=...). Not a goal: Debian's
# libtorch-dev or a source build of PyTorch (pass -DCMAKE_PREFIX_PATH=<its prefix> and
# -DTENAX_PYTHON=OFF to use one; NCCL is then found only if its header and library are on the
# default paths).
#
# Sets, for the rest of the build:
#   TORCH_LIBRARIES, TORCH_CUDA_LIBRARIES   from torch's own CMake files (find_package(Torch))
#   TENAX_WITH_CUDA                         ON when this libtorch has CUDA
#   TENAX_NCCL_INCLUDE_DIR, TENAX_NCCL_LIBRARY   NCCL's header and library (c10d's NCCL header
#                                           includes nccl.h); TENAX_WITH_NCCL ON when both exist
#   TENAX_TORCH_PYTHON                      the interpreter that found it (tests and benchmarks)

set(_tenax_default_python "")
if(EXISTS "${CMAKE_SOURCE_DIR}/.deps/venv/bin/python")
  set(_tenax_default_python "${CMAKE_SOURCE_DIR}/.deps/venv/bin/python")
else()
  find_program(_tenax_python3 python3)
  if(_tenax_python3)
    set(_tenax_default_python "${_tenax_python3}")
  endif()
endif()
set(TENAX_PYTHON "${_tenax_default_python}" CACHE STRING
    "Python whose torch package provides libtorch (OFF: use CMAKE_PREFIX_PATH alone)")

set(TENAX_TORCH_PYTHON "")
if(TENAX_PYTHON)
  # One call answers every path: torch's prefix, and where the CUDA 13 toolkit and NCCL wheels
  # put their files (absent on a machine whose CUDA is installed system-wide).
  execute_process(
    COMMAND "${TENAX_PYTHON}" -c [=[
import os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print(os.path.dirname(torch.__file__))
print(torch.__version__)
print(os.path.join(site, "nvidia", "cu13"))
print(os.path.join(site, "nvidia", "nccl"))
]=]
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR
      "${TENAX_PYTHON} cannot import torch:\n${_err}\nRun ./scripts/setup (it installs PyTorch's "
      "wheel into .deps/venv), or pass -DTENAX_PYTHON=<a python with torch>.")
  endif()
  string(REPLACE "\n" ";" _out "${_out}")
  list(GET _out 0 _torch_dir)
  list(GET _out 1 _torch_version)
  list(GET _out 2 _cuda_dir)
  list(GET _out 3 _nccl_dir)
  message(STATUS "tenax: libtorch ${_torch_version} from ${_torch_dir} (${TENAX_PYTHON})")
  set(TENAX_TORCH_PYTHON "${TENAX_PYTHON}")
  # torch/ is the install prefix: lib/, include/ and share/cmake/Torch beneath it. Searched first,
  # so that a system libtorch (Debian's libtorch-dev) is never picked up instead.
  list(PREPEND CMAKE_PREFIX_PATH "${_torch_dir}")
  if(EXISTS "${_cuda_dir}/bin/nvcc")
    # torch's cuda.cmake finds the toolkit through FindCUDA (nvcc and libcudart) and then
    # enable_language(CUDA); the wheel's toolkit has no fixed root for either to guess.
    set(CUDA_TOOLKIT_ROOT_DIR "${_cuda_dir}" CACHE PATH "CUDA toolkit (from the wheels)")
    set(CUDAToolkit_ROOT "${_cuda_dir}" CACHE PATH "CUDA toolkit (from the wheels)")
    set(CMAKE_CUDA_COMPILER "${_cuda_dir}/bin/nvcc" CACHE FILEPATH "nvcc (from the wheels)")
  endif()
  if(EXISTS "${_nccl_dir}/include/nccl.h")
    set(_tenax_nccl_hint "${_nccl_dir}")
  endif()
endif()

# Hopper (H100, H200) is what the lent machines have and what CI compiles device code for; CUDA
# 13 supports sm_75 and newer. Override with -DTORCH_CUDA_ARCH_LIST="8.0;9.0;10.0".
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "GPU architectures for tenax's device code")
endif()

find_package(Torch REQUIRED)
set(TENAX_WITH_CUDA OFF)
if(TORCH_CUDA_LIBRARIES)
  set(TENAX_WITH_CUDA ON)
endif()

set(TENAX_WITH_NCCL OFF)
if(TENAX_WITH_CUDA)
  find_path(TENAX_NCCL_INCLUDE_DIR nccl.h HINTS ${_tenax_nccl_hint} PATH_SUFFIXES include)
  # The wheel ships only the versioned name; the linker takes a full path as well.
  find_library(TENAX_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_tenax_nccl_hint}
               PATH_SUFFIXES lib)
  if(TENAX_NCCL_INCLUDE_DIR AND TENAX_NCCL_LIBRARY)
    set(TENAX_WITH_NCCL ON)
    message(STATUS "tenax: NCCL from ${TENAX_NCCL_LIBRARY}")
  else()
    message(WARNING "tenax: this libtorch has CUDA but NCCL's header or library was not found: "
                    "multi-rank GPU training is disabled (install nvidia-nccl-cu13, or pass "
                    "-DTENAX_NCCL_INCLUDE_DIR= and -DTENAX_NCCL_LIBRARY=)")
  endif()
endif()
