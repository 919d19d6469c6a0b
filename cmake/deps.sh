#!/usr/bin/env bash
# Installs the Debian packages rotary's builds need, if any is missing.
# Usage: cmake/deps.sh [tests|bench|cross|lint|fuzz|torch|mca]...   (no argument: tests)
set -euo pipefail

pkgs=(cmake ninja-build g++ libeigen3-dev)  # ninja-build: the presets' generator
for what in "${@:-tests}"; do
  case "$what" in
    tests) pkgs+=(clang googletest libgtest-dev libbenchmark-dev nlohmann-json3-dev) ;;
    bench) pkgs+=(libbenchmark-dev) ;;
    cross) pkgs+=(g++-aarch64-linux-gnu qemu-user libgtest-dev googletest) ;;
    lint) pkgs+=(clang clang-tidy cppcheck) ;;
    # tests/fuzz (clang's libFuzzer + ASan/UBSan runtimes live in libclang-rt-14-dev, which clang only
    # recommends) and the tsan preset (g++'s ThreadSanitizer runtime: libtsan2).
    fuzz) pkgs+=(clang libclang-rt-14-dev libtsan2 nlohmann-json3-dev) ;;
    # examples/torch: Debian's torch (for /usr/bin/python3), its headers, pybind11 and pytest.
    torch) pkgs+=(python3-torch libtorch-dev pybind11-dev python3-pytest python3-setuptools) ;;
    # benchmarks/mca/run.sh: llvm-mca-19
    mca) pkgs+=(llvm-19) ;;
    *) echo "deps.sh: unknown set '$what' (tests|bench|cross|lint|fuzz|torch|mca)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "rotary: missing Debian packages: ${missing[*]}" >&2
  echo "rotary: install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "rotary: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
