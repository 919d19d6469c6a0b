# Flags for rotary's own tests, benchmarks and examples. Consumers never see them.
add_library(rotary_dev INTERFACE)
target_link_libraries(rotary_dev INTERFACE rotary::rotary)
if(ROTARY_WERROR)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(rotary_dev INTERFACE -Wall -Wextra -Wpedantic -Werror -Wshadow -Wconversion
                                                -Wno-sign-conversion)
  elseif(MSVC)
    target_compile_options(rotary_dev INTERFACE /W4 /WX)
  endif()
endif()
if(ROTARY_SANITIZE)
  target_compile_options(rotary_dev INTERFACE -fsanitize=address,undefined -fno-sanitize-recover=all
                                              -fno-omit-frame-pointer)
  target_link_options(rotary_dev INTERFACE -fsanitize=address,undefined)
endif()
if(ROTARY_NATIVE)
  target_compile_options(rotary_dev INTERFACE -march=native)
endif()
