# Finds Eigen >= 3.4 (3.4.x and 5.x alike). A version argument cannot express that: Eigen 3.4's
# version file accepts only its own major version, and a range such as 3.4...5 is rejected by it.
macro(rotary_find_eigen)
  if(NOT TARGET Eigen3::Eigen)
    find_package(Eigen3 ${ARGN} NO_MODULE)
  endif()
  if(DEFINED Eigen3_VERSION AND Eigen3_VERSION VERSION_LESS 3.4)
    message(FATAL_ERROR "rotary needs Eigen >= 3.4; found ${Eigen3_VERSION}")
  endif()
endmacro()
