# attncheck_library(NAME PUBLIC_DEPS a b ... PRIVATE_DEPS c d ... [DEVICE_HEADERS h ... DEVICE_DEPS t ...])
# A library from the folder's src/*.cpp (an interface library while the folder has headers only), with the
# folder's include/ as its public headers (a file set, so that install() copies them and the installed
# package points at the copies). Its name in the installed package is attncheck::<NAME without attncheck_>.
# DEVICE_HEADERS (paths under include/) are the headers that CUDA device code may include too (no Eigen, no
# exceptions, C++17): they form the header-only target NAME_device (linking DEVICE_DEPS), which NAME links.
function(attncheck_library name)
  cmake_parse_arguments(ARG "COLD" "" "PUBLIC_DEPS;PRIVATE_DEPS;DEVICE_HEADERS;DEVICE_DEPS;PRECOMPILE" ${ARGN})
  set(include_dir ${CMAKE_CURRENT_SOURCE_DIR}/include)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cpp)
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS ${include_dir}/*.hpp)
  if(ARG_DEVICE_HEADERS)
    list(TRANSFORM ARG_DEVICE_HEADERS PREPEND ${include_dir}/)
    list(REMOVE_ITEM headers ${ARG_DEVICE_HEADERS})
    add_library(${name}_device INTERFACE)
    target_sources(${name}_device INTERFACE FILE_SET HEADERS BASE_DIRS ${include_dir} FILES ${ARG_DEVICE_HEADERS})
    target_link_libraries(${name}_device INTERFACE ${ARG_DEVICE_DEPS})
    target_compile_features(${name}_device INTERFACE cxx_std_17)
    attncheck_export_name(${name}_device)
    list(APPEND ARG_PUBLIC_DEPS ${name}_device)
  endif()
  if(sources)
    add_library(${name} ${sources})
    target_sources(${name} PUBLIC FILE_SET HEADERS BASE_DIRS ${include_dir} FILES ${headers})
    target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
    target_compile_features(${name} PUBLIC cxx_std_20)
    if(ARG_COLD)
      attncheck_quick_build(${name} COLD PRECOMPILE ${ARG_PRECOMPILE})
    else()
      attncheck_quick_build(${name} PRECOMPILE ${ARG_PRECOMPILE})
    endif()
  else()
    add_library(${name} INTERFACE)
    target_sources(${name} INTERFACE FILE_SET HEADERS BASE_DIRS ${include_dir} FILES ${headers})
    target_link_libraries(${name} INTERFACE ${ARG_PUBLIC_DEPS})
    target_compile_features(${name} INTERFACE cxx_std_20)
  endif()
  attncheck_export_name(${name})
endfunction()

# attncheck_export_name(NAME): attncheck_foo is attncheck::foo in the installed package.
function(attncheck_export_name name)
  string(REGEX REPLACE "^attncheck_" "" short ${name})
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${short})
  add_library(attncheck::${short} ALIAS ${name})
endfunction()

# attncheck_quick_build(TARGET [COLD] [PRECOMPILE HEADER ...]): with ATTNCHECK_QUICK_BUILD (the wheel's build,
# pyproject.toml), what makes a cold build of it about a quarter shorter on two cores:
# - the standard library, fmt, Eigen and the HEADERs (e.g. <nlohmann/json.hpp>) parsed once per target instead of
#   once per file (precompiled headers);
# - COLD code (the command line, the reports, the records' reading and writing, the module's bindings: nothing a
#   sweep or a probe spends its time in) compiled at -O1, which costs its compiler a third less than -O3.
# Off elsewhere: ccache reuses objects built with a precompiled header only when told to be sloppy about it
# (CMAKE_CXX_COMPILER_LAUNCHER, top-level CMakeLists.txt), and the benchmarks measure the -O3 build.
function(attncheck_quick_build target)
  cmake_parse_arguments(ARG "COLD" "" "PRECOMPILE" ${ARGN})
  if(NOT ATTNCHECK_QUICK_BUILD)
    return()
  endif()
  target_precompile_headers(${target} PRIVATE <algorithm> <cmath> <cstdint> <filesystem> <functional> <map> <memory>
                            <optional> <span> <string> <vector> <fmt/format.h> <Eigen/Dense> ${ARG_PRECOMPILE})
  if(ARG_COLD AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    target_compile_options(${target} PRIVATE -O1)
  endif()
endfunction()
