# cmake -DBUILD_DIR=... -DSCRATCH=... -DCONSUMER=... -DGENERATOR=... -DCXX=... [-DLAUNCHER=...] -P consumer_test.cmake
# Installs the libraries of BUILD_DIR (component development) into SCRATCH/prefix, then configures, builds and runs
# the consumer project against that prefix alone. Any failing step fails the test with the step's output.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "package consumer: ${what} failed (${code}):\n${out}")
  endif()
  message(STATUS "${what}: ok\n${out}")
endfunction()

file(REMOVE_RECURSE ${SCRATCH})
step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${SCRATCH}/prefix --component development)
# Nothing from the build tree may leak into the consumer: only the prefix is searched.
step("configure" ${CMAKE_COMMAND} -S ${CONSUMER} -B ${SCRATCH}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
     -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER} -DCMAKE_PREFIX_PATH=${SCRATCH}/prefix
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step("build" ${CMAKE_COMMAND} --build ${SCRATCH}/build --parallel 2)
step("attention_norms" ${SCRATCH}/build/attention_norms)
step("every_library" ${SCRATCH}/build/every_library)
file(REMOVE_RECURSE ${SCRATCH})
