// What rotary's cpuid detection (detail/cpu.hpp) finds on the CPU it runs on, against the sizes
// given: `cpu_caches_probe LLC_BYTES L1D_BYTES` exits 0 when both match, 1 (saying what it found)
// when not. tests/CMakeLists.txt runs it under qemu-x86_64's models of AMD EPYC CPUs, whose cpuid
// answers as those CPUs' do but without TOPOEXT's cache leaf 0x8000001D, as some hypervisors do:
// there the sizes come from AMD's legacy leaves 0x80000005 and 0x80000006.
#include <cstdio>
#include <cstdlib>

#include <rotary/dispatch.hpp>  // detail/cpu.hpp

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cpu_caches_probe LLC_BYTES L1D_BYTES\n");
    return 2;
  }
  const rotary::detail::CpuFeatures& f = rotary::detail::cpu_features();
  const long long llc = std::atoll(argv[1]);
  const long long l1 = std::atoll(argv[2]);
  const bool ok = !f.genuine_intel && f.last_level_cache_bytes == llc && f.l1_data_cache_bytes == l1;
  std::printf("%s: last-level cache %lld bytes (want %lld), L1d %lld bytes (want %lld), vendor %s\n",
              ok ? "ok" : "FAILED", static_cast<long long>(f.last_level_cache_bytes), llc,
              static_cast<long long>(f.l1_data_cache_bytes), l1, f.genuine_intel ? "Intel" : "not Intel");
  return ok ? 0 : 1;
}
