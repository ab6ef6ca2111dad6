# Compiler warnings for every target the project defines. Called once from the top-level CMakeLists.txt before
# any add_subdirectory(), so every target of this directory tree (libraries, CLI, tests, benchmarks, the Python
# module) gets the same flags without each one having to ask for them. Third-party headers come in through
# imported targets, whose include paths CMake marks as system paths, so their warnings stay silent.
#
# Host C++ gets the full set. nvcc-compiled .cu files get it through -Xcompiler without -Wpedantic, which fires
# hundreds of times on the line directives of the host code nvcc generates ("a GCC extension").
# ATTNCHECK_WERROR turns warnings into errors; scripts/test sets it, so CI fails on a new warning.
function(attncheck_enable_warnings)
  # -Wextra's -Wmissing-field-initializers is off: aggregates such as reports::PlotSpec and reports::Figure
  # are built positionally on purpose, leaving their trailing members at their defaults.
  set(host_warnings -Wall -Wextra -Wpedantic -Wshadow -Wno-missing-field-initializers)
  # GCC 12 at -O2 and above reports a false overlap in std::string's own memcpy (GCC bug 105329) and a string
  # inside a std::optional as maybe uninitialized when a literal is assigned to it (GCC bug 105562).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
     AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND host_warnings -Wno-restrict -Wno-maybe-uninitialized)
    # The quick build (precompiled headers, -O1 for cold code) inlines std::string's copies differently, and GCC 12
    # then reports false overflows and out-of-bounds copies in them. The ordinary build keeps both warnings on the
    # same sources.
    if(ATTNCHECK_QUICK_BUILD)
      list(APPEND host_warnings -Wno-stringop-overflow -Wno-stringop-overread -Wno-array-bounds)
    endif()
  endif()
  set(cuda_host_warnings -Wall,-Wextra,-Wshadow,-Wno-missing-field-initializers)
  if(ATTNCHECK_WERROR)
    list(APPEND host_warnings -Werror)
    string(APPEND cuda_host_warnings ",-Werror")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${host_warnings}>"
                      "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${cuda_host_warnings}>")
endfunction()
