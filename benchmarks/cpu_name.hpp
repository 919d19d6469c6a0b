// rotary_bench: which CPU the numbers come from. Memory-bound ratios differ between
// microarchitectures of one vendor (on AMD, Zen 4 and Zen 5 VMs both report "AMD EPYC"), so every
// result names the vendor string, the family/model numbers and, where we know it, the
// microarchitecture; the summary header, the CSV, the plots and Google Benchmark's JSON context
// (keys rotary_cpu*) all carry it.
#pragma once

#include <string>

namespace rotary_bench {

struct CpuName {
  std::string vendor;  // x86: the CPUID vendor string ("AuthenticAMD"); AArch64: "arm implementer 0x41"
  std::string brand;   // the marketing name ("AMD EPYC 9R14 96-Core Processor"); VMs often give less
  int family = -1;     // x86 family and model as Linux prints them (base + extended); -1: unknown
  int model = -1;
  int stepping = -1;
  std::string uarch;  // "Zen 4", "Neoverse V2", ...; "" when we have no name for the numbers

  // One line: brand (vendor, family 0x19 = 25, model 0x11 = 17, stepping 1: Zen 4).
  std::string description() const;
};

// The CPU this process runs on (computed once).
const CpuName& this_cpu();

// The microarchitecture name of an x86 vendor/family/model; "" if unknown (AMD: Zen families;
// Intel: the server cores and the client cores with AVX-512). this_cpu() overrides an Intel name the
// CPU's features contradict (a VM's model number).
std::string x86_uarch(const std::string& vendor, int family, int model);

}  // namespace rotary_bench
