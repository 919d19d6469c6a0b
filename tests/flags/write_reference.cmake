# Runs the normally built bits_probe and saves its hashes for the flag-set probes to compare with.
execute_process(COMMAND ${PROBE} OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bits_probe (normal flags) failed: ${rc}")
endif()
file(STRINGS ${OUT} lines)
list(LENGTH lines n)
message(STATUS "bits_probe: ${n} reference hashes in ${OUT}")
