# GRADEX_CUDA=AUTO builds the CUDA kernels when nvcc is found; ON requires it.
set(GRADEX_HAVE_CUDA OFF)
if(NOT GRADEX_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Hopper SASS (H100/H200) plus Ampere PTX, which the driver JIT-compiles
    # on anything newer: two device compiles keep the build short. Our own
    # cache variable, because CMake caches nvcc's default (sm_75) in
    # CMAKE_CUDA_ARCHITECTURES and we could not tell it from a user's choice.
    set(GRADEX_CUDA_ARCHITECTURES "90-real;80-virtual" CACHE STRING
        "CUDA architectures for the gradex kernels (e.g. 100-real for Blackwell SASS)")
    set(CMAKE_CUDA_ARCHITECTURES ${GRADEX_CUDA_ARCHITECTURES})
    # One CUDA runtime in a process: every target links the shared libcudart
    # (CUDA::cudart), as torch does. A static copy next to torch's shared one
    # would keep its own device state, and a bundle would carry it twice.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(GRADEX_HAVE_CUDA ON)
    # CMake 3.25 has no nvcc flags for CUDA20; the .cu files need only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  elseif(GRADEX_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GRADEX_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "gradex: CUDA kernels ${GRADEX_HAVE_CUDA}")
