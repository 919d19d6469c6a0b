// Calls that must not compile, one per ROTARY_MISUSE_CASE (tests/misuse/CMakeLists.txt runs the
// compiler on each and requires the static_assert message that names the cause); case 0 holds the
// valid forms next to them and must compile cleanly, so that the other cases fail for their own
// reason and not for a broken include path.
#include <rotary/rotary.hpp>

#include <cstdint>

namespace {

void call() {
  using rotary::RowMatrix;
  const rotary::Rope<float> rope(rotary::RotarySpec(8, rotary::Pairing::half_split, 10000.0), 64);
  const std::int64_t ids[2] = {0, 1};
  const rotary::Positions pos(ids, 2);
#if ROTARY_MISUSE_CASE == 0
  RowMatrix<float> x = RowMatrix<float>::Zero(2, 8);
  RowMatrix<float> y = x;
  const Eigen::MatrixXf column_major = Eigen::MatrixXf::Zero(2, 8);
  rotary::apply(rope, x, pos, 1);
  rotary::apply(rope, x, y, pos, 1);
  rotary::apply(rope, column_major, y, pos, 1);  // read-only rows of another layout are copied
  rotary::apply(rope, Eigen::Map<RowMatrix<float>>(x.data(), 2, 8), pos, 1);
  rotary::apply(rope, x.topRows(1), pos, 1, rotary::Direction::inverse);
  rotary::unchecked::apply(rope, x, pos, 1);
  rotary::apply_qk(rope, x, y, pos, 1, 1);
  rotary::apply_qk(rope, column_major, x, column_major, y, pos, 1, 1);
  rotary::unchecked::apply_qk(rope, x, y, pos, 1, 1);
  const rotary::CosSinCache<double> cache(rotary::compute_frequencies(rope.spec()), 4);
  (void)cache;
  const rotary::XPos<float> xpos(rotary::RotarySpec(8, rotary::Pairing::half_split, 10000.0));
  rotary::apply(xpos.queries(), x, pos, 1);
  rotary::apply(xpos.keys(2.0), column_major, y, pos, 1);  // read-only rows of another layout are copied
  rotary::unchecked::apply(xpos.queries(), x, pos, 1);
  rotary::apply_qk(xpos.queries(), x, y, pos, 1, 1);
  rotary::apply_qk(xpos.queries(), column_major, x, column_major, y, pos, 1, 1);
  rotary::unchecked::apply_qk(xpos.queries(1.0), x, y, pos, 1, 1, rotary::Direction::inverse);
#elif ROTARY_MISUSE_CASE == 1  // Eigen's default matrix is column-major
  Eigen::MatrixXf x = Eigen::MatrixXf::Zero(2, 8);
  rotary::apply(rope, x, pos, 1);
#elif ROTARY_MISUSE_CASE == 2  // a column-major output
  const RowMatrix<float> x = RowMatrix<float>::Zero(2, 8);
  Eigen::MatrixXf out = Eigen::MatrixXf::Zero(2, 8);
  rotary::apply(rope, x, out, pos, 1);
#elif ROTARY_MISUSE_CASE == 3  // const rows rotated in place
  const RowMatrix<float> q = RowMatrix<float>::Zero(2, 8);
  RowMatrix<float> k = q;
  rotary::apply_qk(rope, q, k, pos, 1, 1);
#elif ROTARY_MISUSE_CASE == 4  // double rows, float rope
  RowMatrix<double> x = RowMatrix<double>::Zero(2, 8);
  rotary::unchecked::apply(rope, x, pos, 1);
#elif ROTARY_MISUSE_CASE == 5  // double input rows, float rope, out of place
  const RowMatrix<double> q = RowMatrix<double>::Zero(2, 8);
  RowMatrix<float> y = RowMatrix<float>::Zero(2, 8);
  rotary::apply_qk(rope, q, y, y, y, pos, 1, 1);
#elif ROTARY_MISUSE_CASE == 6  // a half-precision table
  const rotary::CosSinCache<Eigen::half> cache(rotary::compute_frequencies(rope.spec()), 4);
  (void)cache;
#elif ROTARY_MISUSE_CASE == 7  // xPos member: column-major rows rotated in place
  const rotary::XPos<float> xpos(rotary::RotarySpec(8, rotary::Pairing::half_split, 10000.0));
  Eigen::MatrixXf x = Eigen::MatrixXf::Zero(2, 8);
  rotary::apply(xpos.keys(), x, pos, 1);
#elif ROTARY_MISUSE_CASE == 8  // xPos member: const q rotated in place (unchecked fused)
  const rotary::XPos<float> xpos(rotary::RotarySpec(8, rotary::Pairing::half_split, 10000.0));
  const RowMatrix<float> q = RowMatrix<float>::Zero(2, 8);
  RowMatrix<float> k = q;
  rotary::unchecked::apply_qk(xpos.queries(), q, k, pos, 1, 1);
#elif ROTARY_MISUSE_CASE == 9  // xPos member: double output rows, float xPos
  const rotary::XPos<float> xpos(rotary::RotarySpec(8, rotary::Pairing::half_split, 10000.0));
  const RowMatrix<float> x = RowMatrix<float>::Zero(2, 8);
  RowMatrix<double> out = RowMatrix<double>::Zero(2, 8);
  rotary::apply(xpos.queries(), x, out, pos, 1);
#endif
}

}  // namespace

int main() {
  call();
  return 0;
}
