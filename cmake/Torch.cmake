# LibTorch as ppc uses it: the interface target ppc_torch, for either build configuration
# (docs/build.md):
#
#   PyTorch 2.x     the LibTorch inside the torch package of PyPI's wheel (2.x, CUDA, NCCL),
#                   found with CMAKE_PREFIX_PATH=<site-packages>/torch (scripts/build.sh). It
#                   needs C++20 and the CUDA toolkit (nvcc), and links against the NVIDIA
#                   libraries the wheel ships next to itself in <site-packages>/nvidia.
#   system LibTorch Debian's LibTorch 1.13 (libtorch-dev, scripts/build.sh system): CPU only,
#                   C++17, logs through glog.
#
# Sets PPC_TORCH_VERSION, PPC_HAVE_CUDA, PPC_HAVE_NCCL, PPC_TORCH_USES_GLOG and
# PPC_TORCH_PYTHON, and defines PPC_HAVE_CUDA and PPC_HAVE_NCCL for every target linking
# ppc_torch, so that runtime/platform/TorchCompat.h sees the same configuration in every file. (The
# system LibTorch adds no definition: its compile lines, and ccache's hits, stay as they were.)
# Call after find_package(Torch).

set(PPC_TORCH_VERSION ${Torch_VERSION})
if(NOT PPC_TORCH_VERSION)
  set(PPC_TORCH_VERSION unknown)
endif()

add_library(ppc_torch INTERFACE)
target_include_directories(ppc_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_link_libraries(ppc_torch INTERFACE ${TORCH_LIBRARIES})

# LibTorch 2.x puts cxx_std_20 on its `torch` target; use it everywhere, so that the
# project's libraries do not mix standards (and their -Werror sees C++20 too).
if(TARGET torch)
  get_target_property(ppc_torch_features torch INTERFACE_COMPILE_FEATURES)
  if(ppc_torch_features AND "cxx_std_20" IN_LIST ppc_torch_features)
    set(CMAKE_CXX_STANDARD 20)
  endif()
endif()

# Whether c10 logs through glog (Debian's does; the wheel's has its own logger). The runtime
# then links glog to set its threshold (compat::setTorchLogging).
# (Found anew at every configure: the cache must not keep another LibTorch's answer.)
unset(PPC_TORCH_MACROS_HEADER CACHE)
find_file(PPC_TORCH_MACROS_HEADER NAMES torch/headeronly/macros/cmake_macros.h c10/macros/cmake_macros.h
  PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
set(PPC_TORCH_USES_GLOG OFF)
if(PPC_TORCH_MACROS_HEADER)
  file(STRINGS "${PPC_TORCH_MACROS_HEADER}" ppc_glog REGEX "^#define C10_USE_GLOG")
  if(ppc_glog)
    set(PPC_TORCH_USES_GLOG ON)
  endif()
endif()

set(PPC_HAVE_CUDA OFF)
set(PPC_HAVE_NCCL OFF)
# What a program linking the installed libppc_runtime needs as well (ppcConfig.cmake.in).
set(PPC_TORCH_LINK_OPTIONS "")
set(PPC_NCCL_INCLUDE_DIR "")
if(TORCH_CUDA_LIBRARIES)
  set(PPC_HAVE_CUDA ON)
  target_compile_definitions(ppc_torch INTERFACE PPC_HAVE_CUDA)
  # A wheel's NVIDIA libraries (nvidia-nccl-cu13, ...) sit next to torch/ in site-packages.
  get_filename_component(ppc_nvidia_dir "${TORCH_INSTALL_PREFIX}/../nvidia" ABSOLUTE)
  # NCCL: the headers of the NCCL LibTorch was built with. ProcessGroupNCCL.hpp compiled against
  # another nccl.h (the CUDA toolkit's) disagrees with libtorch_cuda on sizeof(ncclConfig_t),
  # so the wheel's include directory goes first, ahead of the toolkit's.
  unset(PPC_NCCL_INCLUDE_DIR)
  unset(PPC_NCCL_INCLUDE_DIR CACHE)
  find_path(PPC_NCCL_INCLUDE_DIR nccl.h HINTS "${ppc_nvidia_dir}/nccl/include" ${CUDAToolkit_INCLUDE_DIRS})
  if(PPC_NCCL_INCLUDE_DIR AND EXISTS "${TORCH_INSTALL_PREFIX}/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
    set(PPC_HAVE_NCCL ON)
    target_compile_definitions(ppc_torch INTERFACE PPC_HAVE_NCCL)
    target_include_directories(ppc_torch SYSTEM BEFORE INTERFACE "${PPC_NCCL_INCLUDE_DIR}")
  endif()
  # libtorch_cuda.so finds the wheel's libraries at run time through its RPATH; the linker
  # needs to be told, or it resolves libnccl.so.2 (and others) from the CUDA toolkit instead
  # ("undefined reference to ncclCommGrow").
  file(GLOB ppc_nvidia_libs LIST_DIRECTORIES true "${ppc_nvidia_dir}/*/lib")
  foreach(dir ${ppc_nvidia_libs})
    list(APPEND PPC_TORCH_LINK_OPTIONS "LINKER:-rpath-link,${dir}")
  endforeach()
  target_link_options(ppc_torch INTERFACE ${PPC_TORCH_LINK_OPTIONS})
endif()

# PyTorch's Caffe2/public/mkl.cmake gives caffe2::mkl the link directories
# ${MKL_ROOT}/lib, .../lib/intel64, .../intel64_win and .../win-x64 even where MKL_ROOT is
# empty (pytorch/pytorch#73008), so every binary's RUNPATH, the installed ones' too
# (CMAKE_INSTALL_RPATH_USE_LINK_PATH), carried /lib/intel64_win. Keep the directories that
# hold an MKL library.
if(TARGET caffe2::mkl)
  get_target_property(ppc_mkl_dirs caffe2::mkl INTERFACE_LINK_DIRECTORIES)
  set(ppc_mkl_kept "")
  foreach(dir IN LISTS ppc_mkl_dirs)
    file(GLOB ppc_mkl_libs "${dir}/libmkl*")
    if(ppc_mkl_libs)
      list(APPEND ppc_mkl_kept "${dir}")
    endif()
  endforeach()
  set_property(TARGET caffe2::mkl PROPERTY INTERFACE_LINK_DIRECTORIES "${ppc_mkl_kept}")
endif()

# Where installed binaries find this LibTorch's libraries at run time: a wheel's
# site-packages/torch/lib goes into their RPATH (the libraries its CMake config links with
# linker flags, libtorch_cuda.so among them, are not in CMake's link path, so
# CMAKE_INSTALL_RPATH_USE_LINK_PATH alone misses them); a system LibTorch (Debian's, under
# /usr) needs nothing, the loader searches there anyway.
set(PPC_TORCH_INSTALL_RPATH "")
if(NOT TORCH_INSTALL_PREFIX STREQUAL "/usr" AND EXISTS "${TORCH_INSTALL_PREFIX}/lib")
  set(PPC_TORCH_INSTALL_RPATH "${TORCH_INSTALL_PREFIX}/lib")
endif()

# The Python whose torch package holds this LibTorch (scripts/build.sh passes the one
# scripts/python.sh chose; found here for a venv: <prefix>/lib/pythonX.Y/site-packages/torch).
# Every test runs under it (tests/CMakeLists.txt): it makes the test models and computes the
# references. Empty for Debian's LibTorch (tests use /usr/bin/python3).
if(NOT DEFINED PPC_TORCH_PYTHON)
  set(PPC_TORCH_PYTHON "")
  if(TORCH_INSTALL_PREFIX MATCHES "/site-packages/torch$" AND EXISTS "${TORCH_INSTALL_PREFIX}/../../../../bin/python")
    get_filename_component(PPC_TORCH_PYTHON "${TORCH_INSTALL_PREFIX}/../../../../bin/python" ABSOLUTE)
  endif()
endif()

message(STATUS "ppc: LibTorch ${PPC_TORCH_VERSION} at ${TORCH_INSTALL_PREFIX} "
  "(CUDA ${PPC_HAVE_CUDA}, NCCL ${PPC_HAVE_NCCL}, glog ${PPC_TORCH_USES_GLOG}, C++${CMAKE_CXX_STANDARD}, "
  "Python '${PPC_TORCH_PYTHON}')")

# torch.export programs (.pt2, lib/Pt2*.cpp): LibTorch 2.x ships the C++ twin of the export
# schema (torch/csrc/utils/generated_serialization_types.h), header-only over nlohmann-json,
# which the wheel does not ship (Debian's nlohmann-json3-dev, scripts/setup.sh). With both
# PPC_HAVE_PT2 is defined for every target; LibTorch 1.x has no schema and ppc refuses .pt2
# files there in one line. A 2.x LibTorch without nlohmann-json is a configuration error, not a
# silently missing format.
set(PPC_HAVE_PT2 OFF)
unset(PPC_PT2_SCHEMA_HEADER CACHE)
find_file(PPC_PT2_SCHEMA_HEADER torch/csrc/utils/generated_serialization_types.h
  PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(PPC_PT2_SCHEMA_HEADER)
  find_path(PPC_NLOHMANN_INCLUDE_DIR nlohmann/json.hpp)
  if(NOT PPC_NLOHMANN_INCLUDE_DIR)
    message(FATAL_ERROR "ppc: LibTorch ${PPC_TORCH_VERSION} reads torch.export programs through "
      "nlohmann-json, which is not installed (run scripts/setup.sh, or apt install nlohmann-json3-dev)")
  endif()
  set(PPC_HAVE_PT2 ON)
  target_compile_definitions(ppc_torch INTERFACE PPC_HAVE_PT2)
  target_include_directories(ppc_torch SYSTEM INTERFACE "${PPC_NLOHMANN_INCLUDE_DIR}")
endif()
message(STATUS "ppc: torch.export programs (.pt2): ${PPC_HAVE_PT2}")
