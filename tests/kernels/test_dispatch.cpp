// The paths a kernel call takes at run time: streaming stores (which rows, the threshold and
// ROTARY_STREAM_MIN_BYTES, their bits against the scalar kernel's), the ISA dispatch (names, support,
// set_max_isa, ROTARY_MAX_ISA, apply on each ISA) and the clean ymm/zmm upper state on return.
#include <gtest/gtest.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <rotary/dispatch.hpp>
#include <rotary/rotary.hpp>

#include "simd_inputs.hpp"
#include "support.hpp"

namespace {

using rotary::Direction;
using rotary::Isa;
using rotary::Pairing;
using rotary::detail::KernelArgs;
using rotary_test::Bits;
using rotary_test::DType;
using rotary_test::dtype_name;
using rotary_test::from_bits;
using rotary_test::is_nan;
using rotary_test::IsaScope;
using rotary_test::to_bits;
using simd_inputs::base_seed;
using simd_inputs::kAllIsas;
using simd_inputs::random_value;

// ---- kernels under test -------------------------------------------------------------------------

// The kernels come from the registry (detail/kernels/registry.hpp), as dispatch takes them.
using rotary::detail::Kernel;
using rotary::detail::kernel_for;

// ---- streaming stores ----------------------------------------------------------------------------

// stream_min_bytes for the scope; the previous state (resolved or not) back after it.
class StreamScope {
 public:
  explicit StreamScope(std::int64_t bytes) : saved_(rotary::detail::stream_min_bytes_state().load()) {
    rotary::set_stream_min_bytes(bytes);
  }
  ~StreamScope() { rotary::detail::stream_min_bytes_state().store(saved_); }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  std::int64_t saved_;
};

// The arguments stream_pays reads: q of `tokens` x heads rows, out of place unless in == out. The
// pointers are only compared and tested for alignment, never dereferenced.
template <class T>
KernelArgs<T> stream_case(const T* in, T* out, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                          std::int64_t rotary_dim, std::ptrdiff_t out_token_stride, std::ptrdiff_t out_head_stride) {
  KernelArgs<T> a;
  a.tokens = tokens;
  a.head_dim = head_dim;
  a.rotary_dim = rotary_dim;
  a.q = rotary::detail::make_stream(in, rotary::StridedLayout{tokens, heads, heads * head_dim, head_dim}, out,
                                    rotary::StridedLayout{tokens, heads, out_token_stride, out_head_stride});
  return a;
}

TEST(StreamStores, OnlyWholeAlignedRowsOutOfPlace) {
  using rotary::detail::stream_pays;
  alignas(64) static float f[64];
  alignas(64) static rotary::f16 h[64];
  alignas(64) static rotary::bf16 b[64];
  const std::int64_t T = 8192, H = 32, D = 128;
  const std::int64_t written = T * H * D * 4;
  const auto rows = [&](const float* in, float* out) { return stream_case<float>(in, out, T, H, D, D, H * D, D); };
  EXPECT_TRUE(stream_pays(rows(f, f + 32), written));
  EXPECT_TRUE(stream_pays(rows(f, f + 32), 0));
  EXPECT_FALSE(stream_pays(rows(f, f + 32), written + 1));          // below the threshold
  EXPECT_FALSE(stream_pays(rows(f, f), 0));                          // in place
  EXPECT_FALSE(stream_pays(rows(f, f + 33), 0));                     // output off its line
  EXPECT_FALSE(stream_pays(stream_case<float>(f, f + 32, T, H, D, D, H * 130, 130), 0));  // rows off lines
  EXPECT_FALSE(stream_pays(stream_case<float>(f, f + 32, T, H, D, D, H * D + 4, D), 0));  // token stride
  EXPECT_TRUE(stream_pays(stream_case<float>(f, f + 32, T, H, D, D, -H * D, D), 0));     // reversed tokens
  EXPECT_FALSE(stream_pays(stream_case<float>(f, f + 32, T, H, D, 64, H * D, D), 0));    // partial rotary
  EXPECT_FALSE(stream_pays(stream_case<float>(f, f + 32, T, H, 80, 80, H * 80, 80), 0));  // 320-byte rows
  EXPECT_TRUE(stream_pays(stream_case<float>(f, f + 32, T, H, 96, 96, H * 96, 96), 0));   // 384
  EXPECT_FALSE(stream_pays(stream_case<float>(f, f + 32, 0, H, D, D, H * D, D), 0));      // no tokens
  EXPECT_TRUE(stream_pays(stream_case<float>(f, f + 32, T, H, 32, 32, H * 32, 32), 0));   // 128 bytes
  EXPECT_FALSE(stream_pays(stream_case<float>(f, f + 32, T, H, 16, 16, H * 16, 16), 0));  // 64 bytes
  EXPECT_FALSE(stream_pays(stream_case<float>(f, f + 8, T, H, 64, 64, H * 64, 64), 0));   // 32-byte off
  // 16-bit rows by the same rule, in their own bytes
  EXPECT_TRUE(stream_pays(stream_case<rotary::f16>(h, h + 32, T, H, D, D, H * D, D), 0));
  EXPECT_TRUE(stream_pays(stream_case<rotary::bf16>(b, b + 32, T, H, D, D, H * D, D), 0));
  EXPECT_TRUE(stream_pays(stream_case<rotary::f16>(h, h + 32, T, H, 64, 64, H * 64, 64), 0));   // 128 bytes
  EXPECT_FALSE(stream_pays(stream_case<rotary::f16>(h, h + 32, T, H, 32, 32, H * 32, 32), 0));  // 64 bytes
  EXPECT_FALSE(stream_pays(stream_case<rotary::bf16>(b, b + 16, T, H, D, D, H * D, D), 0));     // 32-byte off
  EXPECT_FALSE(stream_pays(stream_case<rotary::bf16>(b, b + 32, T, H, D, D, H * D, D), T * H * D * 2 + 1));
  // fused: k written in place keeps the whole call plain
  KernelArgs<float> qk = rows(f, f + 32);
  qk.k = rotary::detail::make_stream<float>(f + 16, rotary::StridedLayout{T, 8, 8 * D, D}, f + 16,
                                            rotary::StridedLayout{T, 8, 8 * D, D});
  EXPECT_FALSE(stream_pays(qk, 0));
  qk.k.out = f + 48;
  EXPECT_TRUE(stream_pays(qk, 0));
  EXPECT_TRUE(stream_pays(qk, written + T * 8 * D * 4));  // q's and k's bytes together
}

// Every kernel (named variants included) with KernelArgs::stream_out set on whole aligned rows, out
// of place, q and k: the scalar kernel's bits (ISAs without streaming stores ignore the flag).
template <class T>
void check_streamed_kernels(Pairing pairing, std::int64_t head_dim, Direction dir) {
  const std::int64_t tokens = 37, q_heads = 5, k_heads = 2, d = head_dim;
  const std::int64_t q_n = tokens * q_heads * d, k_n = tokens * k_heads * d;
  constexpr std::int64_t kAlign = 64 / static_cast<std::int64_t>(sizeof(T));
  std::mt19937_64 rng(base_seed() ^ 0x57e4u ^ static_cast<std::uint64_t>(head_dim));
  std::vector<T> in(static_cast<std::size_t>(q_n + k_n));
  for (T& v : in) v = random_value<T>(rng);
  // outputs at 64-byte boundaries: q then k, each padded to whole lines
  std::vector<T> storage(static_cast<std::size_t>(q_n + k_n + 2 * kAlign));
  const auto aligned = [&](std::vector<T>& buf) {
    T* p = buf.data();
    while (reinterpret_cast<std::uintptr_t>(p) % 64 != 0) ++p;
    return p;
  };
  const rotary::Rope<T> rope(rotary::RotarySpec(d, pairing), 4096);
  const rotary::StridedLayout ql{tokens, q_heads, q_heads * d, d}, kl{tokens, k_heads, k_heads * d, d};
  std::vector<T> want;
  for (const auto& v : rotary::detail::kernel_variants<T>()) {
    if (!v.runs) continue;
    std::fill(storage.begin(), storage.end(), from_bits<T>(Bits<T>::sentinel));
    T* q_out = aligned(storage);
    T* k_out = q_out + q_n;
    KernelArgs<T> a = rotary::detail::make_args(rope, rotary::detail::make_stream(in.data(), ql, q_out, ql),
                                                rotary::detail::make_stream(in.data() + q_n, kl, k_out, kl), tokens,
                                                rotary::Positions::contiguous(3000), dir);
    a.stream_out = true;
    ASSERT_TRUE(rotary::detail::stream_pays(a, 0)) << "the case must be one the driver streams";
    v.kernel(a, 0, tokens);
    std::vector<T> got(q_out, q_out + q_n + k_n);
    if (v.isa == Isa::scalar) {
      want = got;
      continue;
    }
    ASSERT_EQ(want.size(), got.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      differ += (to_bits(got[i]) != to_bits(want[i]) && !(is_nan(got[i]) && is_nan(want[i]))) ? 1 : 0;
    EXPECT_EQ(differ, 0u) << v.name << " " << rotary::to_string(pairing) << " head_dim " << head_dim;
  }
  ASSERT_FALSE(want.empty());
}

TEST(StreamStores, KernelsMatchScalar) {
  for (const Pairing p : {Pairing::half_split, Pairing::interleaved})
    for (const Direction dir : {Direction::forward, Direction::inverse}) {
      for (const std::int64_t d : {32, 64, 128, 256}) {
        check_streamed_kernels<float>(p, d, dir);
        check_streamed_kernels<double>(p, d, dir);
      }
      // 16-bit: the streamed step counts (64, 128; 256 half-split) and rows that decline them (192,
      // interleaved 256: written plain)
      for (const std::int64_t d : {64, 128, 192, 256}) {
        check_streamed_kernels<rotary::f16>(p, d, dir);
        check_streamed_kernels<rotary::bf16>(p, d, dir);
      }
    }
}

// Through the driver: with every call streamed (threshold 0) the entry points give the scalar
// kernel's bits on every ISA, on aligned outputs (streamed) and outputs one element off (plain).
template <class T>
void check_streamed_calls(Pairing pairing) {
  const std::int64_t tokens = 29, heads = 6, d = 128;
  const std::int64_t n = tokens * heads * d;
  std::mt19937_64 rng(base_seed() ^ 0x57e5u);
  std::vector<T> in(static_cast<std::size_t>(n));
  for (T& v : in) v = random_value<T>(rng);
  const rotary::Rope<T> rope(rotary::RotarySpec(d, pairing), 4096);
  const rotary::StridedLayout l{tokens, heads, heads * d, d};
  const StreamScope always(0);
  for (const std::ptrdiff_t off : {0, 1}) {
    std::vector<T> storage(static_cast<std::size_t>(n + 64));
    T* out = storage.data();
    while (reinterpret_cast<std::uintptr_t>(out) % 64 != 0) ++out;
    out += off;
    std::vector<T> want;
    for (const Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon}) {
      if (!rotary::isa_supported(isa)) continue;
      IsaScope scope(isa);
      rotary::apply_strided(rope, in.data(), l, out, l, rotary::Positions::contiguous(100));
      std::vector<T> got(out, out + n);
      if (isa == Isa::scalar) {
        want = got;
        continue;
      }
      std::size_t differ = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        differ += (to_bits(got[i]) != to_bits(want[i]) && !(is_nan(got[i]) && is_nan(want[i]))) ? 1 : 0;
      EXPECT_EQ(differ, 0u) << rotary::to_string(isa) << " " << rotary::to_string(pairing) << " offset " << off;
    }
  }
}

TEST(StreamStores, CallsMatchScalar) {
  for (const Pairing p : {Pairing::half_split, Pairing::interleaved}) {
    check_streamed_calls<float>(p);
    check_streamed_calls<double>(p);
    check_streamed_calls<rotary::f16>(p);
    check_streamed_calls<rotary::bf16>(p);
  }
}

TEST(StreamStores, Threshold) {
  EXPECT_THROW(rotary::set_stream_min_bytes(-1), rotary::error);
  const StreamScope scope(12345);
  EXPECT_EQ(rotary::stream_min_bytes(), 12345);
  rotary::set_stream_min_bytes(rotary::kStreamNever);
  EXPECT_EQ(rotary::stream_min_bytes(), rotary::kStreamNever);
  // the default: 3/8 of the last-level cache cpuid describes, or never
  const std::int64_t llc = rotary::detail::cpu_features().last_level_cache_bytes;
  EXPECT_EQ(rotary::detail::default_stream_min_bytes(), llc > 0 ? llc / 8 * 3 : rotary::kStreamNever);
  EXPECT_GE(llc, 0);
}

#if ROTARY_X86_KERNELS
// AMD's legacy cache leaves (the fallback where 0x8000001D describes nothing), register values laid
// out as AMD's manual gives them: a Zen 5 core's 48 KiB L1d, 1 MiB L2 and 32 MiB L3 (the low bits:
// associativity and line size, which the sizes must ignore).
TEST(CpuFeatures, AmdLegacyCacheLeaves) {
  constexpr unsigned l1_ecx = 48u << 24 | 0x0C0140u;
  constexpr unsigned l2_ecx = 1024u << 16 | 0x6140u;
  constexpr unsigned l3_edx = 64u << 18 | 0x9140u;
  using rotary::detail::amd_legacy_cache_bytes;
  static_assert(amd_legacy_cache_bytes(l1_ecx, l2_ecx, l3_edx, true) == 48 * 1024);
  EXPECT_EQ(amd_legacy_cache_bytes(l1_ecx, l2_ecx, l3_edx, false), std::int64_t{32} << 20);
  EXPECT_EQ(amd_legacy_cache_bytes(l1_ecx, l2_ecx, 0x9140u, false), std::int64_t{1} << 20);  // no L3: the L2
  EXPECT_EQ(amd_legacy_cache_bytes(0, 0, 0, false), 0);  // nothing described: 0, never streamed
  EXPECT_EQ(amd_legacy_cache_bytes(0, 0, 0, true), 0);
  // the widest fields
  EXPECT_EQ(amd_legacy_cache_bytes(~0u, ~0u, ~0u, false), std::int64_t{0x3FFF} * 512 * 1024);
  EXPECT_EQ(amd_legacy_cache_bytes(~0u, ~0u, ~0u, true), 255 * 1024);
}
#endif

// ROTARY_STREAM_MIN_BYTES is read at a process's first call (as ROTARY_MAX_ISA): each value in a
// fresh process. Exit code 7 when the threshold read equals `expect`, 42 after printing the error.
[[noreturn]] void exit_with_stream_min_bytes(const char* env_value, std::int64_t expect) {
  rotary::detail::stream_min_bytes_state().store(rotary::detail::kStreamUnresolved);
  setenv("ROTARY_STREAM_MIN_BYTES", env_value, 1);
  try {
    const rotary::Rope<float> rope(rotary::RotarySpec(8), 4);
    std::vector<float> x(8, 1.0f);
    rotary::apply_strided(rope, x.data(), rotary::StridedLayout{1, 1, 8, 8}, rotary::Positions::contiguous(1));
    std::exit(rotary::stream_min_bytes() == expect ? 7 : 1);
  } catch (const rotary::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(42);
  }
}

TEST(StreamStores, EnvironmentVariable) {
  GTEST_FLAG_SET(death_test_style, rotary_test::death_test_style());
  using ::testing::ExitedWithCode;
  EXPECT_EXIT(exit_with_stream_min_bytes("1048576", 1048576), ExitedWithCode(7), "");
  EXPECT_EXIT(exit_with_stream_min_bytes("0", 0), ExitedWithCode(7), "");
  EXPECT_EXIT(exit_with_stream_min_bytes("never", rotary::kStreamNever), ExitedWithCode(7), "");
  EXPECT_EXIT(exit_with_stream_min_bytes("", rotary::detail::default_stream_min_bytes()), ExitedWithCode(7), "");
  EXPECT_EXIT(exit_with_stream_min_bytes("9223372036854775807", rotary::kStreamNever), ExitedWithCode(7), "");
  for (const char* bad : {"-1", "1e6", "12 ", "9223372036854775808", "always"})
    EXPECT_EXIT(exit_with_stream_min_bytes(bad, 0), ExitedWithCode(42), "ROTARY_STREAM_MIN_BYTES") << bad;
}

// ---- dispatch -----------------------------------------------------------------------------------

TEST(Dispatch, Names) {
  for (const Isa isa : kAllIsas) EXPECT_EQ(rotary::parse_isa(rotary::to_string(isa)), isa);
  EXPECT_EQ(rotary::to_string(Isa::avx512), "avx512");
  try {
    rotary::parse_isa("sse2");
    ADD_FAILURE() << "parse_isa(\"sse2\") did not throw";
  } catch (const rotary::error& e) {
    EXPECT_NE(std::string(e.what()).find("isa (\"sse2\")"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rotary::parse_isa("AVX2"), rotary::error);
  EXPECT_THROW(rotary::parse_isa(""), rotary::error);
}

TEST(Dispatch, Supported) {
  const rotary::detail::CpuFeatures& f = rotary::detail::cpu_features();
  std::printf("[          ] cpu: avx2 %d fma %d f16c %d avx512 f %d vl %d bw %d dq %d bf16 %d; best isa %s\n",
              f.avx2, f.fma, f.f16c, f.avx512f, f.avx512vl, f.avx512bw, f.avx512dq, f.avx512bf16,
              std::string(rotary::to_string(rotary::best_isa())).c_str());
  EXPECT_TRUE(rotary::isa_supported(Isa::scalar));
  EXPECT_EQ(rotary::isa_supported(Isa::neon), ROTARY_NEON_KERNELS != 0);  // AdvSIMD: all of AArch64
  EXPECT_TRUE(rotary::isa_supported(rotary::best_isa()));
  EXPECT_EQ(rotary::isa_supported(Isa::avx2), ROTARY_X86_KERNELS && f.avx2_set());
  EXPECT_EQ(rotary::isa_supported(Isa::avx512), ROTARY_X86_KERNELS && f.avx512_set());
  if (rotary::isa_supported(Isa::avx512)) {
    EXPECT_TRUE(rotary::isa_supported(Isa::avx2));
  }
  for (const Isa isa : kAllIsas)
    if (rotary::isa_supported(isa)) {
      EXPECT_NE(kernel_for<float>(isa), nullptr) << rotary::to_string(isa);
      EXPECT_LE(static_cast<int>(isa), static_cast<int>(rotary::best_isa())) << rotary::to_string(isa);
    }
}

TEST(Dispatch, SetMaxIsa) {
  const IsaScope restore;
  for (const Isa isa : kAllIsas) {
    if (rotary::isa_supported(isa)) {
      rotary::set_max_isa(isa);
      EXPECT_EQ(rotary::active_isa(), isa);
    } else {
      const Isa before = rotary::active_isa();
      try {
        rotary::set_max_isa(isa);
        ADD_FAILURE() << "set_max_isa(" << rotary::to_string(isa) << ") did not throw";
      } catch (const rotary::error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(rotary::to_string(isa))), std::string::npos)
            << e.what();
      }
      EXPECT_EQ(rotary::active_isa(), before) << "a failed set_max_isa changed the active ISA";
    }
  }
}

// Through the public API: each selectable ISA gives the scalar kernel's bits.
TEST(Dispatch, ApplyUsesEachIsa) {
  const IsaScope restore;
  for (const Pairing p : {Pairing::half_split, Pairing::interleaved}) {
    const rotary::Rope<float> rope(rotary::RotarySpec(70, p, 10000.0, 50), 40);
    const std::int64_t tokens = 9;
    const std::int64_t heads = 5;
    std::mt19937_64 rng(7);
    rotary::RowMatrix<float> x(tokens * heads, 70);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = random_value<float>(rng);
    rotary::RowMatrix<float> want(x.rows(), x.cols());
    KernelArgs<float> a =
        rotary::detail::make_args(rope, x.data(), rotary::StridedLayout{tokens, heads, heads * 70, 70},
                                  want.data(), rotary::StridedLayout{tokens, heads, heads * 70, 70},
                                  rotary::Positions::contiguous(3), Direction::forward);
    rotary::detail::scalar::rotate_tokens(a, 0, tokens);
    for (const Isa isa : kAllIsas) {
      if (!rotary::isa_supported(isa)) continue;
      rotary::set_max_isa(isa);
      rotary::RowMatrix<float> got(x.rows(), x.cols());
      rotary::apply(rope, x, got, rotary::Positions::contiguous(3), heads);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * static_cast<std::size_t>(x.size())), 0)
          << rotary::to_string(isa) << " " << rotary::to_string(p);
    }
  }
}

// f16 and bf16 reach the SIMD kernels through the public API too (detail::select_kernel), with the
// scalar kernel's bits.
template <class T>
void check_dispatch_dtype() {
  using rotary::detail::Kernel;
  const std::int64_t tokens = 9;
  const std::int64_t heads = 5;
  const std::int64_t head_dim = 70;
  for (const Pairing p : {Pairing::half_split, Pairing::interleaved}) {
    const rotary::Rope<T> rope(rotary::RotarySpec(head_dim, p, 10000.0, 50), 40);
    std::mt19937_64 rng(11);
    rotary::RowMatrix<T> x(tokens * heads, head_dim);
    for (Eigen::Index i = 0; i < x.size(); ++i)
      x.data()[i] = rotary::detail::from_compute<T>(static_cast<float>(random_value<float>(rng)));
    rotary::RowMatrix<T> want(x.rows(), x.cols());
    const rotary::StridedLayout layout{tokens, heads, heads * head_dim, head_dim};
    KernelArgs<T> a = rotary::detail::make_args(rope, x.data(), layout, want.data(), layout,
                                                rotary::Positions::contiguous(3), Direction::forward);
    rotary::detail::scalar::rotate_tokens(a, 0, tokens);
    for (const Isa isa : kAllIsas) {
      if (!rotary::isa_supported(isa)) continue;
      rotary::set_max_isa(isa);
      const Kernel<T> selected = rotary::detail::select_kernel<T>();
      EXPECT_EQ(selected, kernel_for<T>(isa)) << rotary::dtype_name<T>() << " " << rotary::to_string(isa);
      rotary::RowMatrix<T> got(x.rows(), x.cols());
      rotary::apply(rope, x, got, rotary::Positions::contiguous(3), heads);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(T) * static_cast<std::size_t>(x.size())), 0)
          << rotary::dtype_name<T>() << " " << rotary::to_string(isa) << " " << rotary::to_string(p);
    }
  }
}

TEST(Dispatch, ApplyUsesEachIsaForF16AndBf16) {
  const IsaScope restore;
  check_dispatch_dtype<rotary::f16>();
  check_dispatch_dtype<rotary::bf16>();
}

// ---- the vector registers' upper state after a kernel ----------------------------------------------
// Every AVX2 / AVX-512 entry point (rotate, RMSNorm rows, KV-cache rows) must return with the upper
// halves of ymm/zmm 0-15 clean: baseline code (legacy SSE encodings) that runs while they are dirty
// pays an SSE/AVX transition on its SSE instructions (cpu.hpp: clear_upper_state). g++ puts no
// vzeroupper before returns at -O0, -O1 and -Os, and at -O3 left it out before the cache-row kernels'
// tail call; an int8 cache write then ran ~3x slower on a Xeon (Sapphire Rapids or later). XINUSE
// (xgetbv with ecx = 1) says which state components are not in their initial configuration: bit 2,
// the upper halves of ymm0-15; bit 6, bits 256-511 of zmm0-15. Skipped where the CPU cannot report
// it, and in a TU built with AVX enabled (its own code may leave the state dirty before the read).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX__)
std::uint64_t dirty_upper_state() {
  unsigned lo = 0;
  unsigned hi = 0;
  __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (std::uint64_t{hi} << 32 | lo) & 0x44u;
}

// Whether XINUSE tells dirty from clean on this CPU: the architecture lets a CPU report a component
// in use although it is in its initial configuration, so the test first checks that a 256-bit write
// (in asm: the compiler does not see it) sets the bits and a vzeroupper clears them. Only called
// where AVX2 runs.
bool xinuse_tracks_upper_state() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(0xd, 1, &a, &b, &c, &d) == 0 || ((a >> 2) & 1u) == 0) return false;
  __asm__ __volatile__("vpcmpeqd %%ymm0, %%ymm0, %%ymm0" ::: "xmm0");
  const bool set = dirty_upper_state() != 0;
  __asm__ __volatile__("vzeroupper" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  return set && dirty_upper_state() == 0;
}

template <class T>
void check_clean_after_kernels(Isa isa) {
  const std::string where = std::string(rotary::to_string(isa)) + " " + std::string(rotary::dtype_name<T>());
  std::mt19937_64 rng(5);
  for (const std::int64_t n : {128, 100}) {  // whole vectors, and a tail
    std::vector<T> in(static_cast<std::size_t>(3 * n));
    for (T& v : in) v = rotary::detail::from_compute<T>(static_cast<float>(random_value<float>(rng)));
    std::vector<T> out(in.size());
    for (const Pairing p : {Pairing::half_split, Pairing::interleaved}) {
      const rotary::Rope<T> rope(rotary::RotarySpec(n, p, 10000.0), 8);
      const rotary::StridedLayout layout{1, 3, 3 * n, n};
      const KernelArgs<T> a = rotary::detail::make_args(rope, in.data(), layout, out.data(), layout,
                                                        rotary::Positions::contiguous(5), Direction::forward);
      kernel_for<T>(isa)(a, 0, 1);
      EXPECT_EQ(dirty_upper_state(), 0u) << where << " rotate, " << rotary::to_string(p) << ", n " << n;
    }
    if constexpr (!std::is_same_v<T, double>) {
      std::vector<float> weight(static_cast<std::size_t>(n), 1.5f);
      rotary::detail::NormArgs<T> na;
      na.in = in.data();
      na.in_stride = n;
      na.out = out.data();
      na.out_stride = n;
      na.rows = 3;
      na.n = n;
      na.weight = weight.data();
      na.eps = 1e-6;
      na.inv_n = 1.0 / static_cast<double>(n);
      rotary::detail::norm_kernel_for<T>(isa)(na);
      EXPECT_EQ(dirty_upper_state(), 0u) << where << " norm rows, n " << n;
      std::vector<std::uint16_t> codes(static_cast<std::size_t>(n));
      float scale = 0.0f;
      using rotary::detail::CacheCode;
      for (const CacheCode code : {CacheCode::int8, CacheCode::fp8_e4m3, CacheCode::f16, CacheCode::bf16}) {
        rotary::detail::CacheRowArgs<T> ca;
        ca.in = in.data();
        ca.n = n;
        ca.out = codes.data();
        ca.code = code;
        ca.scale = &scale;
        ca.inv_scale = 0.5f;
        rotary::detail::cache_row_kernel_for<T>(isa)(ca);
        EXPECT_EQ(dirty_upper_state(), 0u)
            << where << " cache row, code " << static_cast<int>(code) << ", n " << n;
      }
    }
  }
}

TEST(SimdKernels, ReturnWithTheUpperStateClean) {
  if (!rotary::isa_supported(Isa::avx2)) GTEST_SKIP() << "no AVX2 / AVX-512 kernels on this CPU";
  if (!xinuse_tracks_upper_state())
    GTEST_SKIP() << "this CPU's XINUSE (xgetbv ecx = 1) does not tell a dirty upper state from a clean one";
  for (const Isa isa : {Isa::avx2, Isa::avx512}) {
    if (!rotary::isa_supported(isa)) continue;
    check_clean_after_kernels<float>(isa);
    check_clean_after_kernels<double>(isa);
    check_clean_after_kernels<rotary::f16>(isa);
    check_clean_after_kernels<rotary::bf16>(isa);
  }
}
#endif

// ROTARY_MAX_ISA is read at a process's first dispatch, so each check runs in a fresh process: the
// threadsafe death-test style re-executes this binary for the statement. Exit code: the active ISA,
// or 42 after printing the rotary::error. Under an emulator death tests only fork (support.hpp), so
// the child forgets the ISA its parent resolved: the state of a fresh process.
void forget_active_isa() {
  rotary::detail::active_isa_state().store(rotary::detail::kIsaUnresolved, std::memory_order_relaxed);
}

[[noreturn]] void exit_with_active_isa(const char* env_value, bool via_apply) {
  forget_active_isa();
  setenv("ROTARY_MAX_ISA", env_value, 1);
  try {
    if (via_apply) {
      const rotary::Rope<float> rope(rotary::RotarySpec(8), 4);
      std::vector<float> x(8, 1.0f);
      rotary::apply_strided(rope, x.data(), rotary::StridedLayout{1, 1, 8, 8},
                            rotary::Positions::contiguous(1));
    }
    std::exit(static_cast<int>(rotary::active_isa()));
  } catch (const rotary::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(42);
  }
}

TEST(Dispatch, EnvironmentVariable) {
  GTEST_FLAG_SET(death_test_style, rotary_test::death_test_style());
  using ::testing::ExitedWithCode;
  for (const Isa isa : kAllIsas) {
    const std::string name(rotary::to_string(isa));
    if (rotary::isa_supported(isa)) {
      EXPECT_EXIT(exit_with_active_isa(name.c_str(), false), ExitedWithCode(static_cast<int>(isa)), "")
          << name;
      EXPECT_EXIT(exit_with_active_isa(name.c_str(), true), ExitedWithCode(static_cast<int>(isa)), "")
          << name;
    } else {  // e.g. neon on x86-64: an error, not a silent fallback
      EXPECT_EXIT(exit_with_active_isa(name.c_str(), false), ExitedWithCode(42),
                  "ROTARY_MAX_ISA \\(\"" + name + "\"\\).*not supported")
          << name;
      EXPECT_EXIT(exit_with_active_isa(name.c_str(), true), ExitedWithCode(42), "ROTARY_MAX_ISA") << name;
    }
  }
  EXPECT_EXIT(exit_with_active_isa("avx1024", false), ExitedWithCode(42), "ROTARY_MAX_ISA \\(\"avx1024\"\\)");
  EXPECT_EXIT(exit_with_active_isa("avx1024", true), ExitedWithCode(42), "ROTARY_MAX_ISA \\(\"avx1024\"\\)");
  EXPECT_EXIT(exit_with_active_isa("", false), ExitedWithCode(static_cast<int>(rotary::best_isa())), "");
}

// set_max_isa() overrides the environment, even an invalid one.
[[noreturn]] void exit_after_set_max_isa(const char* env_value, Isa isa) {
  forget_active_isa();
  setenv("ROTARY_MAX_ISA", env_value, 1);
  try {
    rotary::set_max_isa(isa);
    std::exit(static_cast<int>(rotary::active_isa()));
  } catch (const rotary::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(42);
  }
}

TEST(Dispatch, SetMaxIsaOverridesEnvironment) {
  GTEST_FLAG_SET(death_test_style, rotary_test::death_test_style());
  using ::testing::ExitedWithCode;
  EXPECT_EXIT(exit_after_set_max_isa("scalar", rotary::best_isa()),
              ExitedWithCode(static_cast<int>(rotary::best_isa())), "");
  EXPECT_EXIT(exit_after_set_max_isa("bogus", Isa::scalar), ExitedWithCode(static_cast<int>(Isa::scalar)),
              "");
}

}  // namespace
