# Sanitizer and fuzzing builds (scripts/test.sh builds both against the system LibTorch).
#
#   PPC_SANITIZE=address,undefined  instruments every target (gcc or clang); UBSan findings
#                                   abort (-fno-sanitize-recover) so a test fails on them.
#   PPC_FUZZ=ON                     (clang only) adds coverage instrumentation for libFuzzer to
#                                   every target and builds the fuzz targets in fuzz/.
#
# LibTorch and LLVM Support come prebuilt from Debian and are not instrumented: ASan still
# checks every access made by ppc's own code, and its allocator sees LibTorch's allocations.
set(PPC_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined")
option(PPC_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

if(PPC_SANITIZE)
  set(ppc_sanitize_flags -fsanitize=${PPC_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  if(PPC_SANITIZE MATCHES "undefined")
    # The vptr check references the typeinfo of every polymorphic class it sees, and
    # LibTorch does not export some (c10::DynamicType): ppc would not link.
    list(APPEND ppc_sanitize_flags -fno-sanitize=vptr)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND PPC_SANITIZE MATCHES "undefined")
    # clang's -fsanitize=function checks calls through function pointers against RTTI
    # of the callee, which LibTorch's gcc-built code does not carry.
    list(APPEND ppc_sanitize_flags -fno-sanitize=function)
  endif()
  add_compile_options(${ppc_sanitize_flags})
  add_link_options(-fsanitize=${PPC_SANITIZE})
endif()

if(PPC_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PPC_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  if(NOT PPC_SANITIZE)
    message(WARNING "PPC_FUZZ without PPC_SANITIZE finds crashes only; add -DPPC_SANITIZE=address,undefined")
  endif()
  # Coverage feedback from ppc's own code (the parsers under test live in ppc_lib and
  # ppc_runtime); the fuzz targets link libFuzzer's main with -fsanitize=fuzzer.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
