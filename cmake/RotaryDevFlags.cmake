# Flags for rotary's own tests, benchmarks and examples. Consumers never see them.
# rotary_dev_header_only: warnings, sanitizers, -march=native; every kernel compiled in the TU that
# calls it, as in a header-only consumer. rotary_dev: the same, plus rotary::kernels under
# ROTARY_DEV_SEPARATE_KERNELS (below).
add_library(rotary_dev_header_only INTERFACE)
target_link_libraries(rotary_dev_header_only INTERFACE rotary::rotary)
set(_rotary_dev_flags "")  # compile flags, also given to rotary_kernels below
if(ROTARY_WERROR)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    list(APPEND _rotary_dev_flags -Wall -Wextra -Wpedantic -Werror -Wshadow -Wconversion -Wno-sign-conversion)
  elseif(MSVC)
    list(APPEND _rotary_dev_flags /W4 /WX)
  endif()
endif()
if(ROTARY_SANITIZE)
  list(APPEND _rotary_dev_flags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(rotary_dev_header_only INTERFACE -fsanitize=address,undefined)
endif()
if(ROTARY_SANITIZE_THREAD)
  if(ROTARY_SANITIZE)
    message(FATAL_ERROR "rotary: ROTARY_SANITIZE (ASan) and ROTARY_SANITIZE_THREAD (TSan) cannot be combined")
  endif()
  list(APPEND _rotary_dev_flags -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(rotary_dev_header_only INTERFACE -fsanitize=thread)
endif()
if(ROTARY_NATIVE)
  list(APPEND _rotary_dev_flags -march=native)
endif()
target_compile_options(rotary_dev_header_only INTERFACE ${_rotary_dev_flags})

add_library(rotary_dev INTERFACE)
target_link_libraries(rotary_dev INTERFACE rotary_dev_header_only)
# ROTARY_DEV_SEPARATE_KERNELS (every test preset): tests and examples link rotary::kernels, so the
# kernels are compiled once per build instead of once per TU, with the same flags (and
# -Wsign-conversion on). Header-only consumption is built and tested all the same: by the flag matrix
# (tests/flags: header-only by design, since its point is compiling the kernels under each flag set;
# its set `plain` is the build's own flags), the strict consumer (tests/strict, tests/build_types.sh),
# the packaging tests and the benchmark.
option(ROTARY_DEV_SEPARATE_KERNELS "Developer builds: link rotary::kernels (kernels compiled once)" OFF)
if(ROTARY_DEV_SEPARATE_KERNELS)
  target_link_libraries(rotary_dev INTERFACE rotary::kernels)
  list(REMOVE_ITEM _rotary_dev_flags -Wno-sign-conversion)
  target_compile_options(rotary_kernels PRIVATE ${_rotary_dev_flags})
endif()
