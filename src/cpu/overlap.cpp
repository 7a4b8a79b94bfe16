// Exact byte overlap of two strided views (overlap.h says how and why).
#include "overlap.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

namespace circlerope::cpu {

namespace {

__extension__ typedef __int128 Wide;  // addresses plus extents plus shifts never overflow it

struct Lattice {
  Wide base = 0;
  Wide width = 0;
  int dims = 0;
  std::array<Wide, 4> stride{}, count{};  // count >= 2, stride > width, ascending stride
  Wide low() const { return base; }
  Wide high() const {  // one past the last byte
    Wide h = base + width;
    for (int k = 0; k < dims; ++k) h += (count[k] - 1) * stride[k];
    return h;
  }
  Lattice outer_dropped() const {  // without the largest-stride dimension
    Lattice out = *this;
    --out.dims;
    return out;
  }
  Lattice shifted(Wide by) const {
    Lattice out = *this;
    out.base += by;
    return out;
  }
};

Lattice lattice(const HeadTensor& t) {
  Lattice l;
  const auto size = static_cast<Wide>(dtype_size(t.dtype));
  l.base = static_cast<Wide>(reinterpret_cast<std::uintptr_t>(t.data));
  l.width = size;
  std::array<std::pair<Wide, Wide>, 4> dims{};  // (stride, count)
  int n = 0;
  for (std::size_t k = 0; k < 4; ++k)
    if (t.shape[k] > 1 && t.strides[k] > 0) dims[n++] = {static_cast<Wide>(t.strides[k]) * size, t.shape[k]};
  for (int k = 1; k < n; ++k)  // insertion sort by stride (std::sort trips GCC 12's -Warray-bounds here)
    for (int j = k; j > 0 && dims[j].first < dims[j - 1].first; --j) std::swap(dims[j], dims[j - 1]);
  // In ascending order of stride: a dimension whose runs touch (stride <= width) widens the
  // run; once one does not, no larger stride does either (the width no longer grows).
  for (int k = 0; k < n; ++k) {
    if (l.dims == 0 && dims[k].first <= l.width) {
      l.width += (dims[k].second - 1) * dims[k].first;
    } else {
      l.stride[l.dims] = dims[k].first;
      l.count[l.dims] = dims[k].second;
      ++l.dims;
    }
  }
  return l;
}

Wide floor_div(Wide a, Wide p) { return a >= 0 ? a / p : -((-a + p - 1) / p); }

// The k in [k_low, k_high] for which [a_low + kP, a_high + kP) meets [b_low, b_high).
void shifts_that_meet(const Lattice& a, const Lattice& b, Wide p, Wide k_low, Wide k_high, Wide& from, Wide& to) {
  // a_low + kP < b_high  and  b_low < a_high + kP
  to = std::min(k_high, floor_div(b.high() - a.low() - 1, p));
  from = std::max(k_low, floor_div(b.low() - a.high(), p) + 1);
}

Overlap decide(const Lattice& a, const Lattice& b, int& budget) {
  if (--budget < 0) return Overlap::undecided;
  if (a.high() <= b.low() || b.high() <= a.low()) return Overlap::disjoint;
  if (a.dims == 0 && b.dims == 0) return Overlap::shared;  // two runs whose boxes meet
  const Wide pa = a.dims ? a.stride[a.dims - 1] : 0, pb = b.dims ? b.stride[b.dims - 1] : 0;
  if (pa == pb) {  // A = U_i A' + iP, B = U_j B' + jP: A' + (i - j)P against B'
    const Lattice a1 = a.outer_dropped(), b1 = b.outer_dropped();
    Wide from = 0, to = 0;
    shifts_that_meet(a1, b1, pa, -(b.count[b.dims - 1] - 1), a.count[a.dims - 1] - 1, from, to);
    for (Wide k = from; k <= to; ++k) {
      const Overlap r = decide(a1.shifted(k * pa), b1, budget);
      if (r != Overlap::disjoint) return r;
    }
    return Overlap::disjoint;
  }
  // Only the view with the larger stride splits along it: S = U_i S' + iP against O.
  const bool split_a = pa > pb;
  const Lattice& s = split_a ? a : b;
  const Lattice& o = split_a ? b : a;
  const Wide p = split_a ? pa : pb;
  const Lattice s1 = s.outer_dropped();
  Wide from = 0, to = 0;
  shifts_that_meet(s1, o, p, 0, s.count[s.dims - 1] - 1, from, to);
  for (Wide i = from; i <= to; ++i) {
    const Overlap r = decide(s1.shifted(i * p), o, budget);
    if (r != Overlap::disjoint) return r;
  }
  return Overlap::disjoint;
}

}  // namespace

Overlap byte_overlap(const HeadTensor& a, const HeadTensor& b, int budget) {
  for (std::size_t k = 0; k < 4; ++k)
    if (a.shape[k] == 0 || b.shape[k] == 0) return Overlap::disjoint;
  return decide(lattice(a), lattice(b), budget);
}

Overlap byte_overlap(const HeadTensor& a, const void* data, std::size_t bytes, int budget) {
  for (std::size_t k = 0; k < 4; ++k)
    if (a.shape[k] == 0) return Overlap::disjoint;
  if (bytes == 0) return Overlap::disjoint;
  Lattice run;  // one run, no dimension
  run.base = static_cast<Wide>(reinterpret_cast<std::uintptr_t>(data));
  run.width = static_cast<Wide>(bytes);
  return decide(lattice(a), run, budget);
}

}  // namespace circlerope::cpu
