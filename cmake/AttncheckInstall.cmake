# `cmake --install BUILD --prefix P`: the libraries in attncheck_exported_targets with their public headers and
# the CMake package attncheck (find_package(attncheck) in another project gives attncheck::<name>), component
# "development"; the program, component "runtime". The Python module installs itself, component "python".
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTNCHECK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attncheck)

install(TARGETS ${attncheck_exported_targets} EXPORT attncheckTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT development
        FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development)
install(EXPORT attncheckTargets NAMESPACE attncheck:: DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR}
        COMPONENT development)

# The config file finds again what the libraries link (static libraries carry their dependencies to the
# consumer's link line); these values choose which.
set(ATTNCHECK_PACKAGE_CUDA ${ATTNCHECK_WITH_CUDA})
set(ATTNCHECK_PACKAGE_SANITIZE ${ATTNCHECK_SANITIZE})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/attncheckConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attncheckConfig.cmake
                              INSTALL_DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attncheckConfig.cmake ${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
        DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR} COMPONENT development)

install(TARGETS attncheck RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
