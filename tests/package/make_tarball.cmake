# Setup for rotary.package.fetchcontent: packs the rotary source tree into a tarball that a
# FetchContent consumer downloads from a file:// URL (no network).
#   cmake -DROTARY_SOURCE_DIR=<tree> -DSTAGE_DIR=<scratch> -DTARBALL=<out.tar.gz>
#         [-DSTALE_DIRS=<dir>[|<dir>...]] -P make_tarball.cmake
# The archive holds one top directory, rotary/, like a release archive. It has the tree as git
# archive would ship it, tests/, benchmarks/ and examples/ included, so that the consumer's check
# "no developer targets" means that rotary's defaults turned them off, not that they were missing.
# Entries that do not exist (LICENSE, README.md before they are written) are skipped.
foreach(_v IN ITEMS ROTARY_SOURCE_DIR STAGE_DIR TARBALL)
  if(NOT ${_v})
    message(FATAL_ERROR "make_tarball.cmake: pass -D${_v}=...")
  endif()
endforeach()
foreach(_required IN ITEMS CMakeLists.txt cmake include)
  if(NOT EXISTS "${ROTARY_SOURCE_DIR}/${_required}")
    message(FATAL_ERROR "make_tarball.cmake: ${ROTARY_SOURCE_DIR}/${_required} does not exist")
  endif()
endforeach()

# A consumer build left from an earlier run would keep its old download: FetchContent has no hash
# to notice that the tarball changed.
string(REPLACE "|" ";" STALE_DIRS "${STALE_DIRS}")
file(REMOVE_RECURSE "${STAGE_DIR}" "${TARBALL}" ${STALE_DIRS})

set(_entries "")
foreach(_e IN ITEMS CMakeLists.txt CMakePresets.json LICENSE README.md cmake include tests benchmarks
                    examples)
  if(EXISTS "${ROTARY_SOURCE_DIR}/${_e}")
    list(APPEND _entries "${ROTARY_SOURCE_DIR}/${_e}")
  endif()
endforeach()
file(MAKE_DIRECTORY "${STAGE_DIR}/rotary")
file(COPY ${_entries} DESTINATION "${STAGE_DIR}/rotary")

execute_process(COMMAND "${CMAKE_COMMAND}" -E tar czf "${TARBALL}" rotary
                WORKING_DIRECTORY "${STAGE_DIR}" RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "make_tarball.cmake: cmake -E tar failed (${_rc})")
endif()
message(STATUS "rotary source tarball: ${TARBALL}")
