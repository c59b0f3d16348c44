# How every copy of libautograd_device_logging.so is linked: its dynamic
# symbol table holds its API and nothing else, and it uses the process's C++
# runtime, the shared libstdc++ and libgcc_s that libtorch uses.
#
# Note [The library exports its API and nothing else]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The library is loaded ahead of libtorch so that its
# Engine::compute_dependencies comes first in lookup order. Every other symbol
# it exports comes first too: a vague-linkage instantiation from a header
# (std::string's constructors, c10::WarningHandler's destructor, typeinfo
# objects) is bound process-wide to the library's copy, and a toolchain that
# links libstdc++ statically exports the whole runtime (vtables of
# std::exception and std::ios_base, every locale facet), which then interposes
# libtorch's references to libstdc++ and crashes `import torch` in a process
# that loaded another C++ runtime first. -fvisibility=hidden covers only what
# the library compiles, so the link also gets:
# - a version script (torch/csrc/autograd/autograd_device_logging.map) that
#   lists the API, the interposed definition, the C ABI and the C++ API of
#   device_logging.h and device_stats.h, and makes every other symbol local,
#   whatever its visibility or origin;
# - --exclude-libs,ALL, so that nothing taken from an archive (libstdc++.a,
#   libgcc.a, libgcc_eh.a) is ever exported, even if the script is widened.
# test/test_exported_symbols.py holds the dynamic symbol table to the API the
# headers declare.
#
# Note [One C++ runtime per process]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# torch's wheels need the shared libstdc++.so.6 and libgcc_s.so.1, and so does
# this library, on every toolchain: it is linked against the shared runtime
# rather than refusing toolchains that would link it statically. Some
# toolchains users build extensions with link libstdc++ statically by
# default (an /opt GCC whose libstdc++.so is a dangling link next to its
# libstdc++.a, devtoolsets' nonshared archives, -static-libstdc++ in the
# flags). Refusing them would turn away users whose only fault is their
# compiler's default, while the fix is one link item: libstdc++.so.6 named by
# its soname (-l:libstdc++.so.6) ahead of the driver's own -lstdc++, and
# libgcc_s.so.1 likewise ahead of -lgcc_eh. The linker then resolves every
# runtime symbol from the shared runtime the process already has, even under
# -static-libstdc++ -static-libgcc, and only symbols that runtime lacks
# (a compiler newer than the system's libstdc++) could come from an archive,
# where --exclude-libs keeps them unexported. A compiler whose library path
# holds no libstdc++.so.6 at all cannot do this, and configure stops with one
# line naming it and the fix.

set(ADL_EXPORTED_API_MAP "${PROJECT_SOURCE_DIR}/torch/csrc/autograd/autograd_device_logging.map")
set(ADL_SHARED_CXX_RUNTIME_LINK_ITEMS "-l:libstdc++.so.6" "-l:libgcc_s.so.1")

# Note [One C++ runtime per process]: a probe library, linked as the library
# is, must need the shared runtime.
function(adl_check_shared_cxx_runtime)
  set(dir "${CMAKE_BINARY_DIR}/CMakeFiles/adl_shared_cxx_runtime_probe")
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${dir}/probe.cpp" [=[
#include <stdexcept>
#include <string>
std::string adl_shared_cxx_runtime_probe(int x) {
  if (x != 0) {
    throw std::runtime_error(std::to_string(x));
  }
  return {};
}
]=])
  execute_process(
    COMMAND "${CMAKE_CXX_COMPILER}" -shared -fPIC "${dir}/probe.cpp" -o "${dir}/probe.so"
      ${ADL_SHARED_CXX_RUNTIME_LINK_ITEMS}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  set(needed "")
  if(rc EQUAL 0)
    find_program(ADL_OBJDUMP NAMES objdump "${CMAKE_OBJDUMP}" REQUIRED)
    execute_process(COMMAND "${ADL_OBJDUMP}" -p "${dir}/probe.so" OUTPUT_VARIABLE needed)
  endif()
  if(NOT needed MATCHES "NEEDED +libstdc\\+\\+\\.so\\.6" OR NOT needed MATCHES "NEEDED +libgcc_s\\.so\\.1")
    string(REGEX REPLACE "\n.*" "" first_error "${out}")
    message(FATAL_ERROR
      "autograd_device_logging: ${CMAKE_CXX_COMPILER} cannot link a shared library against the "
      "shared libstdc++.so.6 and libgcc_s.so.1 that torch uses (${first_error}); put the folder "
      "of torch's libstdc++.so.6 on LIBRARY_PATH, or build with a compiler that has it "
      "(CXX=/usr/bin/g++).")
  endif()
endfunction()
adl_check_shared_cxx_runtime()

# Links `target`, a copy of the library, as the two Notes above say.
function(adl_link_library_into_torch_process target)
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${ADL_EXPORTED_API_MAP}"
    "LINKER:--exclude-libs,ALL")
  target_link_libraries(${target} PRIVATE ${ADL_SHARED_CXX_RUNTIME_LINK_ITEMS})
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${ADL_EXPORTED_API_MAP}")
endfunction()
