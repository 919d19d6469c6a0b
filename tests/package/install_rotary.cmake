# Setups for rotary.package.build_tree_export and rotary.package.find_package, in two steps:
#   STEP=build     configures the rotary source tree as a user would before installing it (no tests,
#                  benchmarks or examples) into a scratch build tree, and builds it. That build tree
#                  is the one build_tree_export finds.
#   STEP=install   `cmake --install`s that build tree into the scratch prefix.
#   cmake -DSTEP=build|install -DROTARY_SOURCE_DIR=<tree> -DBUILD_DIR=<scratch build> -DPREFIX=<prefix>
#         -DGENERATOR=<generator> [-DGENERATOR_PLATFORM=..] [-DGENERATOR_TOOLSET=..]
#         [-DMAKE_PROGRAM=..] [-DCXX_COMPILER=..] [-DCXX_FLAGS=..] [-DBUILD_TYPE=..] [-DCONFIG=..]
#         [-DEIGEN3_DIR=..] [-DSTALE_DIRS=<dir>[|<dir>...]] -P install_rotary.cmake
foreach(_v IN ITEMS STEP ROTARY_SOURCE_DIR BUILD_DIR PREFIX GENERATOR)
  if(NOT ${_v})
    message(FATAL_ERROR "install_rotary.cmake: pass -D${_v}=...")
  endif()
endforeach()

set(_configure -S "${ROTARY_SOURCE_DIR}" -B "${BUILD_DIR}" -G "${GENERATOR}"
    -DROTARY_BUILD_TESTS=OFF -DROTARY_BUILD_BENCHMARKS=OFF -DROTARY_BUILD_EXAMPLES=OFF
    "-DCMAKE_INSTALL_PREFIX=${PREFIX}")
if(GENERATOR_PLATFORM)
  list(APPEND _configure -A "${GENERATOR_PLATFORM}")
endif()
if(GENERATOR_TOOLSET)
  list(APPEND _configure -T "${GENERATOR_TOOLSET}")
endif()
foreach(_pair IN ITEMS MAKE_PROGRAM:CMAKE_MAKE_PROGRAM CXX_COMPILER:CMAKE_CXX_COMPILER
                       CXX_FLAGS:CMAKE_CXX_FLAGS BUILD_TYPE:CMAKE_BUILD_TYPE EIGEN3_DIR:Eigen3_DIR)
  string(REPLACE ":" ";" _pair "${_pair}")
  list(GET _pair 0 _in)
  list(GET _pair 1 _out)
  if(${_in})
    list(APPEND _configure "-D${_out}=${${_in}}")
  endif()
endforeach()
set(_config "")
if(CONFIG)
  set(_config --config "${CONFIG}")
endif()

function(_run step)
  execute_process(COMMAND "${CMAKE_COMMAND}" ${ARGN} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    list(JOIN ARGN " " _args)
    message(FATAL_ERROR "install_rotary.cmake: ${step} failed (${_rc}): cmake ${_args}")
  endif()
endfunction()
if(STEP STREQUAL "build")
  # Start clean: a stale build tree or prefix could satisfy find_package with files this tree no
  # longer generates or installs.
  string(REPLACE "|" ";" STALE_DIRS "${STALE_DIRS}")
  file(REMOVE_RECURSE "${BUILD_DIR}" "${PREFIX}" ${STALE_DIRS})
  _run(configure ${_configure})
  _run(build --build "${BUILD_DIR}" ${_config})
  # No check of the build tree's export here: rotary.package.build_tree_export reports on it, and
  # find_package (installed) should still run when only the build-tree export is broken.
  message(STATUS "rotary configured and built in ${BUILD_DIR}")
elseif(STEP STREQUAL "install")
  file(REMOVE_RECURSE "${PREFIX}")
  _run(install --install "${BUILD_DIR}" ${_config})
  if(NOT EXISTS "${PREFIX}/include/rotary/rotary.hpp")
    message(FATAL_ERROR "install_rotary.cmake: ${PREFIX}/include/rotary/rotary.hpp was not installed")
  endif()
  message(STATUS "rotary installed into ${PREFIX}")
else()
  message(FATAL_ERROR "install_rotary.cmake: STEP must be build or install, not '${STEP}'")
endif()
