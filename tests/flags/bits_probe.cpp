// Same bits under every compiler flag set: this program hashes the bytes rotary produces (cos/sin
// tables, scaled frequencies, kernel outputs of every ISA, dtype and pairing, cached and cache-free,
// at small and int64 positions, forward and inverse, partial rotary; the per-head RMSNorm's) and
// either prints the hashes (the reference, built with the project's normal flags) or compares them
// with a reference file (`bits_probe --compare FILE`, built with one value-unsafe flag set each;
// tests/flags/CMakeLists.txt).
// Inputs come from integer arithmetic only, so the flags cannot change them.
// Built with ROTARY_BITS_PROBE_WITH_TESTS, it is one source of a flag set's core-test binary (one unity
// TU: the header-only kernels are compiled once for both): `--compare FILE` runs the probe, anything
// else runs the GoogleTest suite.
#include <rotary/rotary.hpp>

#ifdef ROTARY_BITS_PROBE_WITH_TESTS
#include <gtest/gtest.h>
#endif

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace bits_probe {
namespace {

struct Hash {
  std::uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    bytes(v.data(), v.size() * sizeof(T));
  }
};

std::map<std::string, std::uint64_t> results;

void record(const std::string& key, const Hash& h) { results[key] = h.h; }

// Values in [-4, 4) with 21 fraction bits from a multiplicative hash: exact in every dtype's compute type.
template <class T>
std::vector<T> inputs(std::size_t n, unsigned salt) {
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = (static_cast<std::uint32_t>(i) + salt) * 2654435761u;
    x[i] = T(static_cast<double>(static_cast<std::int32_t>(u >> 8) - (1 << 23)) / static_cast<double>(1 << 21));
  }
  return x;
}

template <class T>
void kernels(const std::string& isa, const char* dtype) {
  constexpr std::int64_t kHeadDim = 70;
  constexpr std::int64_t kHeads = 3;
  constexpr std::int64_t kTokens = 6;
  for (const rotary::Pairing pairing : {rotary::Pairing::interleaved, rotary::Pairing::half_split}) {
    rotary::RotarySpec spec(kHeadDim, pairing, 500000.0);
    spec.rotary_dim = 62;  // partial rotary: pass-through tail, odd pair counts for every lane width
    const rotary::Rope<T> cached(spec, 4096);
    const rotary::Rope<T> fly(spec, rotary::OnTheFly{});
    const std::vector<T> x = inputs<T>(static_cast<std::size_t>(kTokens * kHeads * kHeadDim), 7u);
    const std::vector<std::int64_t> small = {0, 1, 4095, 17, 18, 19};
    const std::vector<std::int64_t> large = {2147483647LL, 3000000000LL, std::int64_t{1} << 40,
                                             (std::int64_t{1} << 62) + 12345, 123456789, 0};
    const std::string key = isa + "." + dtype + "." + std::string(rotary::to_string(pairing));
    for (const rotary::Direction dir : {rotary::Direction::forward, rotary::Direction::inverse}) {
      const char* d = dir == rotary::Direction::forward ? ".forward" : ".inverse";
      std::vector<T> y = x;
      Eigen::Map<rotary::RowMatrix<T>> ym(y.data(), kTokens * kHeads, kHeadDim);
      rotary::apply(cached, ym, rotary::Positions(small), kHeads, dir);
      Hash a;
      a.vec(y);
      record(key + d + ".cached", a);
      y = x;
      rotary::apply(fly, ym, rotary::Positions(large), kHeads, dir);
      Hash b;
      b.vec(y);
      record(key + d + ".cache_free_int64", b);
      y = x;
      rotary::apply(fly, ym, rotary::Positions::contiguous(1000000), kHeads, dir);  // the recurrence
      Hash c;
      c.vec(y);
      record(key + d + ".cache_free_run", c);
    }
  }
}

// Per-head RMSNorm (rms_norm, the kernel the fused prologues share) on the ISA set_max_isa allows:
// the row lengths with kernels of their own (64, 128, 256) and one without (100), 37 heads a token
// (a block of 32 rows, a batch of 4 and a row left over), weighted and weightless.
template <class T>
void norms(const std::string& isa, const char* dtype) {
  constexpr std::int64_t kHeads = 37;
  constexpr std::int64_t kTokens = 2;
  for (const std::int64_t n : {64, 100, 128, 256}) {
    const std::vector<T> x = inputs<T>(static_cast<std::size_t>(kTokens * kHeads * n), 11u);
    const std::vector<T> w = inputs<T>(static_cast<std::size_t>(n), 13u);
    const rotary::StridedLayout layout{kTokens, kHeads, kHeads * n, n};
    for (const bool weighted : {false, true}) {
      std::vector<T> y(x.size());
      rotary::rms_norm(
          x.data(), layout, y.data(), layout, n,
          weighted ? rotary::HeadNorm<T>::rms(w.data(), 1e-6f) : rotary::HeadNorm<T>::weightless(1e-6f));
      Hash h;
      h.vec(y);
      record(isa + "." + dtype + ".rms_norm." + std::to_string(n) + (weighted ? ".weighted" : ".weightless"),
             h);
    }
  }
}

void frequencies() {
  auto scaled = [](const char* name, rotary::RopeParameters p) {
    rotary::ScalingInput in;
    in.head_dim = 128;
    in.rotary_dim = 128;
    in.max_position_embeddings = 131072;
    const rotary::Frequencies f = rotary::scaled_frequencies(p, in);
    Hash h;
    h.vec(f.theta);
    h.bytes(&f.attention_factor, sizeof f.attention_factor);
    const rotary::CosSinCache<double> c64(f, 1000000, 1000004);
    const rotary::CosSinCache<float> c32(f, 1000000, 1000004);
    for (std::int64_t m = 1000000; m < 1000004; ++m) {
      h.bytes(c64.row(m), static_cast<std::size_t>(c64.rotary_dim()) * sizeof(double));
      h.bytes(c32.row(m), static_cast<std::size_t>(c32.rotary_dim()) * sizeof(float));
    }
    record(std::string("frequencies.") + name, h);
  };
  rotary::RopeParameters p;
  p.rope_theta = 500000.0;
  scaled("default", p);
  rotary::RopeParameters linear = p;
  linear.rope_type = "linear";
  linear.factor = 4.0;
  scaled("linear", linear);
  rotary::RopeParameters llama3 = p;
  llama3.rope_type = "llama3";
  llama3.factor = 8.0;
  llama3.low_freq_factor = 1.0;
  llama3.high_freq_factor = 4.0;
  llama3.original_max_position_embeddings = 8192;
  scaled("llama3", llama3);
  rotary::RopeParameters yarn = p;
  yarn.rope_type = "yarn";
  yarn.factor = 32.0;
  yarn.original_max_position_embeddings = 4096;
  scaled("yarn", yarn);
  rotary::RopeParameters dynamic = p;
  dynamic.rope_type = "dynamic";
  dynamic.factor = 2.0;
  scaled("dynamic", dynamic);
  // The alpha/rho variant with per-pair factors, through a RotarySpec.
  rotary::RotarySpec spec(64, rotary::Pairing::half_split, 10000.0);
  spec.receptive_field = rotary::ReceptiveField{0.25, 0.5};
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  Hash h;
  h.vec(f.theta);
  record("frequencies.alpha_rho", h);
}

}  // namespace

int run(int argc, char** argv) {
  try {
    frequencies();
    for (const rotary::Isa isa : rotary::all_isas()) {
      if (!rotary::isa_supported(isa)) continue;
      rotary::set_max_isa(isa);
      const std::string name(rotary::to_string(isa));
      kernels<float>(name, "f32");
      kernels<double>(name, "f64");
      kernels<rotary::f16>(name, "f16");
      kernels<rotary::bf16>(name, "bf16");
      norms<float>(name, "f32");
      norms<double>(name, "f64");
      norms<rotary::f16>(name, "f16");
      norms<rotary::bf16>(name, "bf16");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bits_probe: %s\n", e.what());
    return 1;
  }
  if (argc == 3 && std::string(argv[1]) == "--compare") {
    std::ifstream in(argv[2]);
    std::map<std::string, std::uint64_t> want;
    std::string key;
    std::string hex;
    while (in >> key >> hex) want[key] = std::stoull(hex, nullptr, 16);
    if (want.empty()) {
      std::fprintf(stderr, "bits_probe: no reference hashes in %s\n", argv[2]);
      return 1;
    }
    int same = 0;
    int different = 0;
    for (const auto& [k, v] : want) {
      const auto it = results.find(k);
      if (it != results.end() && it->second == v) {
        ++same;
      } else {
        ++different;
        std::printf("DIFFERENT: %s\n", k.c_str());
      }
    }
    std::printf("%d of %zu result hashes equal to the normal build's\n", same, want.size());
    return different == 0 && results.size() == want.size() ? 0 : 1;
  }
  for (const auto& [k, v] : results) std::printf("%s %016llx\n", k.c_str(), static_cast<unsigned long long>(v));
  return 0;
}

}  // namespace bits_probe

int main(int argc, char** argv) {
#ifdef ROTARY_BITS_PROBE_WITH_TESTS
  if (!(argc == 3 && std::string(argv[1]) == "--compare")) {
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
  }
#endif
  return bits_probe::run(argc, argv);
}
