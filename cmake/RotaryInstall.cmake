# Install rules and the package config: find_package(rotary CONFIG) after `cmake --install`, and
# the build tree exported for find_package without installing.
include(CMakePackageConfigHelpers)
set(ROTARY_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/rotary")  # header-only: arch independent

install(TARGETS rotary EXPORT rotaryTargets)
install(DIRECTORY include/rotary DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT rotaryTargets NAMESPACE rotary:: DESTINATION "${ROTARY_CMAKE_DIR}")

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
