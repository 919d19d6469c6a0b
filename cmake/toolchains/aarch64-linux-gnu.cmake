# Cross build for AArch64 Linux with Debian's g++-aarch64-linux-gnu; executables (tests, examples)
# run under qemu-user. Used by the `aarch64` preset. Needs: g++-aarch64-linux-gnu qemu-user googletest
# (cmake/deps.sh cross).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(ROTARY_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${ROTARY_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${ROTARY_CROSS_TRIPLE}-g++)

# ctest runs target executables (add_test with a target name, gtest_discover_tests) through this.
# -L: the target's dynamic loader and libstdc++ live under Debian's multiarch-cross prefix.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/${ROTARY_CROSS_TRIPLE})

# Libraries and headers come from the target prefix only; programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${ROTARY_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Eigen is header-only and architecture independent: the host's libeigen3-dev serves the target.
# An explicit *_DIR is used as given, outside the root path.
set(Eigen3_DIR /usr/share/eigen3/cmake CACHE PATH "Eigen3Config.cmake (header-only; host copy)")
