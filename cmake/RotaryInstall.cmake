# Install rules and the package config: find_package(rotary CONFIG) after `cmake --install`, and
# the build tree exported for find_package without installing.
include(CMakePackageConfigHelpers)
set(ROTARY_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/rotary")  # header-only: arch independent

install(TARGETS rotary EXPORT rotaryTargets)
install(DIRECTORY include/rotary DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT rotaryTargets NAMESPACE rotary:: DESTINATION "${ROTARY_CMAKE_DIR}")

# rotary::kernels, a static library: the one architecture-specific part of the package. Its own export
# set, so that the package config can leave it out where the consumer's target differs from this build's
# (the headers and rotary::rotary stay usable there, and the version file stays ARCH_INDEPENDENT).
install(TARGETS rotary_kernels EXPORT rotaryKernelsTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(EXPORT rotaryKernelsTargets NAMESPACE rotary:: DESTINATION "${ROTARY_CMAKE_DIR}")
# What the package config compares with the consumer's (rotaryConfig.cmake.in).
set(ROTARY_KERNELS_SYSTEM_NAME "${CMAKE_SYSTEM_NAME}")
set(ROTARY_KERNELS_SYSTEM_PROCESSOR "${CMAKE_SYSTEM_PROCESSOR}")
set(ROTARY_KERNELS_SIZEOF_VOID_P "${CMAKE_SIZEOF_VOID_P}")

configure_package_config_file(cmake/rotaryConfig.cmake.in
  "${PROJECT_BINARY_DIR}/rotaryConfig.cmake" INSTALL_DESTINATION "${ROTARY_CMAKE_DIR}")
# Semantic versioning: while the major version is 0, a minor release may break the API.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_rotary_compat SameMinorVersion)
else()
  set(_rotary_compat SameMajorVersion)
endif()
if(CMAKE_VERSION VERSION_LESS 3.14)
  write_basic_package_version_file("${PROJECT_BINARY_DIR}/rotaryConfigVersion.cmake"
    COMPATIBILITY ${_rotary_compat})
else()
  write_basic_package_version_file("${PROJECT_BINARY_DIR}/rotaryConfigVersion.cmake"
    COMPATIBILITY ${_rotary_compat} ARCH_INDEPENDENT)
endif()
install(FILES "${PROJECT_BINARY_DIR}/rotaryConfig.cmake" "${PROJECT_BINARY_DIR}/rotaryConfigVersion.cmake"
        DESTINATION "${ROTARY_CMAKE_DIR}")
install(FILES LICENSE README.md DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/rotary" OPTIONAL)
if(EXISTS "${PROJECT_SOURCE_DIR}/docs")  # the pages README.md links to
  install(DIRECTORY docs DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/rotary")
endif()

export(EXPORT rotaryTargets NAMESPACE rotary:: FILE "${PROJECT_BINARY_DIR}/rotaryTargets.cmake")
export(EXPORT rotaryKernelsTargets NAMESPACE rotary:: FILE "${PROJECT_BINARY_DIR}/rotaryKernelsTargets.cmake")
