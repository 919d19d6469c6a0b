// rotary_bench: the CPU's name (cpu_name.hpp). x86 asks CPUID directly, since a VM's /proc/cpuinfo
// may be filtered, but falls back to /proc/cpuinfo for anything CPUID does not answer; other
// architectures read /proc/cpuinfo only (AArch64: implementer and part numbers).
#include "cpu_name.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ROTARY_BENCH_CPUID 1
#else
#define ROTARY_BENCH_CPUID 0
#endif

namespace rotary_bench {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return std::string();
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Parses "0x41", "25" or "0xd4f" (as /proc/cpuinfo writes them); -1 if not a number.
int parse_int(const std::string& s) {
  if (s.empty()) return -1;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 0);
  return end == s.c_str() ? -1 : static_cast<int>(v);
}

// The first processor's fields of /proc/cpuinfo that we use.
struct CpuInfoFile {
  std::string vendor_id, model_name, family, model, stepping, implementer, part;
};

CpuInfoFile read_proc_cpuinfo() {
  CpuInfoFile f;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    std::string* slot = nullptr;
    if (key == "vendor_id")
      slot = &f.vendor_id;
    else if (key == "model name" || key == "Model")
      slot = &f.model_name;
    else if (key == "cpu family")
      slot = &f.family;
    else if (key == "model")
      slot = &f.model;
    else if (key == "stepping")
      slot = &f.stepping;
    else if (key == "CPU implementer")
      slot = &f.implementer;
    else if (key == "CPU part")
      slot = &f.part;
    if (slot != nullptr && slot->empty()) *slot = value;  // first processor only
  }
  return f;
}

// Arm Ltd's server cores (the Graviton / Ampere / Grace class machines a benchmark may run on).
std::string arm_part_name(int implementer, int part) {
  if (implementer != 0x41) return std::string();
  switch (part) {
    case 0xd0c:
      return "Neoverse N1";
    case 0xd40:
      return "Neoverse V1";
    case 0xd49:
      return "Neoverse N2";
    case 0xd4f:
      return "Neoverse V2";
    default:
      return std::string();
  }
}

CpuName detect() {
  CpuName c;
  const CpuInfoFile file = read_proc_cpuinfo();
#if ROTARY_BENCH_CPUID
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &cx, &d) != 0) {
    char vendor[13] = {};
    std::memcpy(vendor + 0, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &cx, 4);
    c.vendor = vendor;
  }
  if (__get_cpuid(1, &a, &b, &cx, &d) != 0) {
    // The display family and model, as the vendors' manuals (and Linux) compose them.
    const int base_family = static_cast<int>((a >> 8) & 0xf);
    const int base_model = static_cast<int>((a >> 4) & 0xf);
    c.stepping = static_cast<int>(a & 0xf);
    c.family = base_family == 0xf ? base_family + static_cast<int>((a >> 20) & 0xff) : base_family;
    c.model = (base_family == 0x6 || base_family == 0xf)
                  ? (static_cast<int>((a >> 16) & 0xf) << 4) + base_model
                  : base_model;
  }
  unsigned brand[12] = {};
  if (__get_cpuid(0x80000004u, &a, &b, &cx, &d) != 0) {
    unsigned* regs = brand;  // leaves 0x80000002..4: four registers of the brand string each
    for (unsigned leaf = 0x80000002u; leaf <= 0x80000004u; ++leaf, regs += 4)
      __get_cpuid(leaf, regs, regs + 1, regs + 2, regs + 3);
    char text[49] = {};
    std::memcpy(text, brand, 48);
    c.brand = trim(text);
  }
#endif
  if (c.vendor.empty()) c.vendor = file.vendor_id;
  if (c.brand.empty()) c.brand = file.model_name;
  if (c.family < 0) c.family = parse_int(file.family);
  if (c.model < 0) c.model = parse_int(file.model);
  if (c.stepping < 0) c.stepping = parse_int(file.stepping);
  if (!file.implementer.empty()) {  // AArch64
    const int implementer = parse_int(file.implementer);
    const int part = parse_int(file.part);
    if (c.vendor.empty()) c.vendor = "arm implementer " + file.implementer + " part " + file.part;
    c.uarch = arm_part_name(implementer, part);
  } else {
    c.uarch = x86_uarch(c.vendor, c.family, c.model);
#if ROTARY_BENCH_CPUID
    // A hypervisor may report another model number than the silicon's (a 2-vCPU Xeon VM with AMX
    // said model 0xa7, Rocket Lake, a client core without AMX). AMX tiles and AVX512-FP16 came with
    // the server cores from Sapphire Rapids on: name that class instead of a model they contradict.
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    const bool amx_fp16 = __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7) != 0 && (d7 >> 24 & 1u) != 0 &&
                          (d7 >> 23 & 1u) != 0;  // AMX-TILE, AVX512-FP16
    const bool server_amx =
        c.uarch == "Sapphire Rapids" || c.uarch == "Emerald Rapids" || c.uarch == "Granite Rapids";
    if (c.vendor == "GenuineIntel" && amx_fp16 && !server_amx)
      c.uarch = "Sapphire Rapids or later, by its AMX and AVX512-FP16 (the model number is a hypervisor's)";
#endif
  }
  if (c.vendor.empty()) c.vendor = "unknown vendor";
  if (c.brand.empty()) c.brand = "unknown CPU";
  return c;
}

}  // namespace

namespace {

// Intel family 6: the server cores (and the few client ones with AVX-512) a benchmark may meet.
std::string intel_uarch(int family, int model) {
  if (family != 6) return std::string();
  switch (model) {
    case 0x55:
      return "Skylake-SP/Cascade Lake";
    case 0x6a:
    case 0x6c:
      return "Ice Lake-SP";
    case 0x7d:
    case 0x7e:
      return "Ice Lake (client)";
    case 0x8c:
    case 0x8d:
      return "Tiger Lake";
    case 0xa7:
      return "Rocket Lake";
    case 0x8f:
      return "Sapphire Rapids";
    case 0xcf:
      return "Emerald Rapids";
    case 0xad:
    case 0xae:
      return "Granite Rapids";
    case 0xaf:
      return "Sierra Forest";
    default:
      return std::string();
  }
}

}  // namespace

std::string x86_uarch(const std::string& vendor, int family, int model) {
  if (vendor == "GenuineIntel") return intel_uarch(family, model);
  if (vendor != "AuthenticAMD") return std::string();
  auto in = [model](int lo, int hi) { return model >= lo && model <= hi; };
  switch (family) {
    case 0x17:
      return model < 0x30 ? "Zen/Zen+" : "Zen 2";
    case 0x19:
      if (in(0x10, 0x1f) || in(0x60, 0x7f) || in(0xa0, 0xaf)) return "Zen 4";
      if (in(0x00, 0x0f) || in(0x20, 0x5f)) return "Zen 3";
      return "Zen 3/Zen 4 (model not in our table)";
    case 0x1a:
      return "Zen 5";
    default:
      return std::string();
  }
}

std::string CpuName::description() const {
  std::string s = brand + " (" + vendor;
  char buf[96];
  if (family >= 0 && model >= 0) {
    std::snprintf(buf, sizeof buf, ", family 0x%x = %d, model 0x%x = %d", static_cast<unsigned>(family),
                  family, static_cast<unsigned>(model), model);
    s += buf;
  }
  if (stepping >= 0) s += ", stepping " + std::to_string(stepping);
  if (!uarch.empty()) s += ": " + uarch;
  return s + ")";
}

const CpuName& this_cpu() {
  static const CpuName cpu = detect();
  return cpu;
}

}  // namespace rotary_bench
