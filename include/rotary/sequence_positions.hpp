// rotary — positions of the tokens of a batch of sequences: one start, a start per sequence,
// restart per packed sequence, a per-token array, or a context-parallel rank's share.
#ifndef ROTARY_SEQUENCE_POSITIONS_HPP
#define ROTARY_SEQUENCE_POSITIONS_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "positions.hpp"
#include "types.hpp"

namespace rotary {


// How context parallelism splits each full sequence of length L = ranks * local_len:
//   contiguous:    rank r holds tokens [r*local_len, (r+1)*local_len)
//   load_balanced: the sequence is cut into 2*ranks chunks of local_len/2 tokens; rank r holds
//                  chunk r then chunk 2*ranks-1-r (the zigzag split of ring attention /
//                  Megatron-CP, balancing causal-attention work). local_len must be even.
enum class ContextSplit { contiguous, load_balanced };

// Positions of the tokens of a batch of sequences. Token t (0-based within its sequence b, local
// length len_b) gets:
//   start(s):          s + t                           (one offset for every sequence)
//   starts({s_b}):     s_b + t                         (one per sequence: decode with different past
//                                                       lengths, or prefill after a cached prefix)
//   restart():         t                               (packed sequences each start at 0)
//   per_token(p):      p[token index in memory order of the batch: b*seq + t, or the packed index]
//   context_parallel(split, rank, ranks[, starts]):
//                      s_b + the position in the unsplit sequence of the rank's local token t
class SequencePositions {
 public:
  enum class Kind { starts, per_token, context_parallel };

  static SequencePositions restart() { return start(0); }
  static SequencePositions start(std::int64_t s) {
    SequencePositions p;
    p.starts_ = {s};
    return p;
  }
  static SequencePositions starts(std::vector<std::int64_t> s) {
    SequencePositions p;
    p.starts_ = std::move(s);
    return p;
  }
  // The array must outlive the call.
  static SequencePositions per_token(const Positions& positions) {
    SequencePositions p;
    p.kind_ = Kind::per_token;
    p.tokens_ = positions;
    return p;
  }
  static SequencePositions context_parallel(ContextSplit split, std::int64_t rank, std::int64_t ranks,
                                            std::vector<std::int64_t> sequence_starts = {0}) {
    SequencePositions p;
    p.kind_ = Kind::context_parallel;
    p.split_ = split;
    p.rank_ = rank;
    p.ranks_ = ranks;
    p.starts_ = std::move(sequence_starts);
    return p;
  }

  Kind kind() const noexcept { return kind_; }
  const std::vector<std::int64_t>& start_offsets() const noexcept { return starts_; }
  const Positions& token_array() const noexcept { return tokens_; }
  ContextSplit split() const noexcept { return split_; }
  std::int64_t rank() const noexcept { return rank_; }
  std::int64_t ranks() const noexcept { return ranks_; }

  // "" or what is wrong for sequences of these local lengths.
  std::string check(const std::vector<std::int64_t>& lengths, std::int64_t total) const {
    if (kind_ == Kind::per_token) return check_token_array(total);
    const auto n = static_cast<std::int64_t>(lengths.size());
    if (std::string m = check_rule(n); !m.empty()) return m;
    if (kind_ == Kind::context_parallel && split_ == ContextSplit::load_balanced)
      for (std::int64_t b = 0; b < n; ++b)
        if (std::string m = check_even(b, lengths[static_cast<std::size_t>(b)]); !m.empty()) return m;
    for (std::int64_t b = 0; b < n; ++b)
      if (std::string m = check_last(b, lengths[static_cast<std::size_t>(b)]); !m.empty()) return m;
    return {};
  }
  // The same for a dense batch: `sequences` sequences of `seq` local tokens each, without a vector of
  // lengths (O(1), or O(sequences) for one start per sequence).
  std::string check(std::int64_t sequences, std::int64_t seq) const {
    using detail::concat;
    if (sequences < 0 || seq < 0) return concat("sequences (", sequences, ") and seq (", seq, ") must be >= 0");
    if (seq > 0 && sequences > std::numeric_limits<std::int64_t>::max() / seq)
      return concat(sequences, " sequences x ", seq, " tokens overflows int64");
    if (kind_ == Kind::per_token) return check_token_array(sequences * seq);
    if (std::string m = check_rule(sequences); !m.empty()) return m;
    if (sequences == 0 || seq == 0) return {};
    if (kind_ == Kind::context_parallel && split_ == ContextSplit::load_balanced)
      if (std::string m = check_even(0, seq); !m.empty()) return m;
    // One start for every sequence: the first sequence's last position is every sequence's.
    const std::int64_t n = starts_.size() == 1 ? 1 : sequences;
    for (std::int64_t b = 0; b < n; ++b)
      if (std::string m = check_last(b, seq); !m.empty()) return m;
    return {};
  }

  // Position of local token t of sequence b (length len), `index` its index in memory order.
  std::int64_t operator()(std::size_t b, std::int64_t t, std::int64_t len, std::int64_t index) const noexcept {
    if (kind_ == Kind::per_token) return tokens_[index];
    const std::int64_t s = starts_.size() == 1 ? starts_[0] : starts_[b];
    if (kind_ == Kind::starts) return s + t;
    if (split_ == ContextSplit::contiguous) return s + rank_ * len + t;
    const std::int64_t c = len / 2;
    return t < c ? s + rank_ * c + t : s + (2 * ranks_ - 1 - rank_) * c + (t - c);
  }

 private:
  SequencePositions() = default;
  std::string check_token_array(std::int64_t total) const {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (tokens_.is_contiguous()) {
      if (total > 0 && tokens_.start() > kMax - (total - 1))
        return detail::concat("per-token positions start (", tokens_.start(), ") + ", total,
                              " tokens overflows int64");
      return {};
    }
    return detail::check_position_array(tokens_, total, "per-token positions");
  }
  // The start offsets and context-parallel split fit n sequences.
  std::string check_rule(std::int64_t n) const {
    using detail::concat;
    if (starts_.size() != 1 && static_cast<std::int64_t>(starts_.size()) != n)
      return concat("sequence start offsets has ", starts_.size(), " values for ", n,
                    " sequences (give 1 or one per sequence)");
    if (kind_ == Kind::context_parallel) {
      if (ranks_ < 1) return concat("context-parallel ranks (", ranks_, ") must be >= 1");
      if (rank_ < 0 || rank_ >= ranks_) return concat("context-parallel rank (", rank_, ") must be in [0, ", ranks_, ")");
    }
    return {};
  }
  std::string check_even(std::int64_t b, std::int64_t length) const {
    if (length % 2 == 0) return {};
    return detail::concat("load-balanced context parallelism: sequence ", b, " has ", length,
                          " local tokens, which must be even (two chunks per rank)");
  }
  // Sequence b's last position, s_b + span - 1 (span: its local length, times the ranks under context
  // parallelism), must fit in int64; negative positions are rejected per token later.
  std::string check_last(std::int64_t b, std::int64_t length) const {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (length <= 0) return {};
    const std::int64_t s = starts_.size() == 1 ? starts_[0] : starts_[static_cast<std::size_t>(b)];
    const std::int64_t ranks = kind_ == Kind::context_parallel ? ranks_ : 1;
    if (ranks > kMax / length || (s > 0 && ranks * length - 1 > kMax - s))
      return ranks == 1 ? detail::concat("sequence ", b, ": start (", s, ") + ", length, " tokens overflows int64")
                        : detail::concat("sequence ", b, ": start (", s, ") + ", ranks, " ranks x ", length,
                                         " local tokens overflows int64");
    return {};
  }

  Kind kind_ = Kind::starts;
  std::vector<std::int64_t> starts_{0};
  Positions tokens_ = Positions::contiguous(0);
  ContextSplit split_ = ContextSplit::contiguous;
  std::int64_t rank_ = 0;
  std::int64_t ranks_ = 1;
};

namespace detail {

// make() allocates memory for n values of `what`: a claim of more than any allocation can hold (a
// view's shape that spans no real buffer) is refused as rotary::error, before anything is written.
template <class Make>
auto allocate_or_refuse(const char* what, std::int64_t n, const Make& make) -> decltype(make()) {
  try {
    return make();
  } catch (const std::length_error&) {
  } catch (const std::bad_alloc&) {
  }
  throw error(concat("the call's ", what, " (", n, " values) do not fit in memory"));
}

}  // namespace detail

// The positions of every token (memory order: sequence after sequence) for sequences of these
// local lengths. Throws rotary::error if `p` does not fit the lengths.
inline std::vector<std::int64_t> token_positions(const SequencePositions& p, const std::vector<std::int64_t>& lengths) {
  std::int64_t total = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    const std::int64_t l = lengths[b];
    if (l < 0) throw error(detail::concat("sequence ", b, " has ", l, " tokens; lengths must be >= 0"));
    if (l > std::numeric_limits<std::int64_t>::max() - total)
      throw error(detail::concat("sequence lengths overflow int64 at sequence ", b, " (", total, " + ", l, ")"));
    total += l;
  }
  const std::string m = p.check(lengths, total);
  if (!m.empty()) throw error(m);
  std::vector<std::int64_t> out = detail::allocate_or_refuse("positions", total, [total] {
    return std::vector<std::int64_t>(static_cast<std::size_t>(total));
  });
  std::int64_t i = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (std::int64_t t = 0; t < lengths[b]; ++t, ++i) out[static_cast<std::size_t>(i)] = p(b, t, lengths[b], i);
  return out;
}

}  // namespace rotary

#endif  // ROTARY_SEQUENCE_POSITIONS_HPP
