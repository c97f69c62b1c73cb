// Mode-n products on the CPU: planner (layout and order by a cost model), strided copies, and
// the executor that runs each step as one GEMM or a strided batch of GEMMs (kronpe::gemm).
#include "kronpe/mode_product.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <numeric>
#include <sstream>

#include "kronpe/blas.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(_WIN32)
#include <malloc.h>
#endif

namespace kronpe {
namespace {

// ---- cost model ------------------------------------------------------------------------
// Seconds-like units, calibrated on a 2-core AVX2 machine with OpenBLAS (only ratios matter).
// A GEMM (M, N, K) runs at `rate` flop/s scaled by e(M) e(N) e(K), e(x) = x / (x + half), plus
// a fixed cost per call; a permuting copy costs `copy_*` per element. The four ways to lay the
// operands out are not equally fast: with OpenBLAS, X A^T (BackKeep) is the fastest, and the
// others lose up to about 45% when the contracted extent n is small (measured: n = 64 runs at
// 0.55 (A X), 0.7 (X^T A^T), 0.75 (A X^T) of X A^T; n = 512 at 0.9-1.0): time is multiplied by
// 1 + penalty * 64 / n.
struct CostModel {
  double rate_f32 = 150e9;
  double half = 12.0;
  double call = 1.5e-6;
  double copy_f32 = 1.5e-9;
};

CostModel& cost_model() {
  static CostModel cm;
  return cm;
}

double eff(index_t x) {
  const double h = cost_model().half;
  return double(x) / (double(x) + h);
}

double layout_penalty(StepKind kind) {
  switch (kind) {
    case StepKind::FrontKeep: return 0.85;
    case StepKind::Batched: return 0.85;
    case StepKind::FrontRotate: return 0.45;
    case StepKind::BackRotate: return 0.3;
    default: return 0.0;
  }
}

// One GEMM of kind `kind`: (m x k) times (k x n) in the row-major sense, k the contracted extent.
double gemm_cost(StepKind kind, index_t m, index_t n, index_t k, int elem_size) {
  const CostModel& cm = cost_model();
  const double rate = cm.rate_f32 * (elem_size == 4 ? 1.0 : 0.5);
  const double slow = 1.0 + layout_penalty(kind) * 64.0 / double(k);
  return 2.0 * double(m) * double(n) * double(k) * slow / (rate * eff(m) * eff(n) * eff(k)) + cm.call;
}

double copy_cost(index_t size, int elem_size) {
  return double(size) * cost_model().copy_f32 * (elem_size == 4 ? 1.0 : 1.6);
}

// ---- the physical layout of a dense buffer -----------------------------------------------
struct Ax {
  int id;        // logical axis
  index_t size;  // current extent
};
using Layout = std::vector<Ax>;

index_t layout_size(const Layout& l) {
  index_t s = 1;
  for (const Ax& a : l) s = checked_mul(s, a.size, "mode product intermediate");
  return s;
}

int position(const Layout& l, int id) {
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i].id == id) return int(i);
  return -1;
}

// pre, n, post of axis `id` in a dense layout.
void split(const Layout& l, int id, index_t& pre, index_t& n, index_t& post) {
  const int p = position(l, id);
  pre = 1;
  post = 1;
  for (int i = 0; i < p; ++i) pre *= l[i].size;
  n = l[p].size;
  for (size_t i = p + 1; i < l.size(); ++i) post *= l[i].size;
}

Layout moved(const Layout& l, int id, int move) {
  if (move == 0) return l;
  const int p = position(l, id);
  Layout out;
  out.reserve(l.size());
  for (size_t i = 0; i < l.size(); ++i)
    if (int(i) != p) out.push_back(l[i]);
  out.push_back(l[p]);  // the only move: to the back (then X A^T, the fastest GEMM layout)
  return out;
}

// Layout after contracting axis `id` (extent becomes m) with `kind` (after any move).
Layout contracted(const Layout& l, int id, index_t m, StepKind kind) {
  const int p = position(l, id);
  if (kind == StepKind::Batched) {
    Layout out = l;
    out[p].size = m;
    return out;
  }
  Layout out;
  out.reserve(l.size());
  const bool to_front = kind == StepKind::FrontKeep || kind == StepKind::BackRotate;
  if (to_front) out.push_back({id, m});
  for (size_t i = 0; i < l.size(); ++i)
    if (int(i) != p) out.push_back(l[i]);
  if (!to_front) out.push_back({id, m});
  return out;
}

// The ids of axes longer than 1, in order: two dense buffers with the same sequence have the
// same memory layout.
std::vector<int> signature(const Layout& l) {
  std::vector<int> s;
  for (const Ax& a : l)
    if (a.size != 1) s.push_back(a.id);
  return s;
}

const char* kind_name(StepKind k) {
  switch (k) {
    case StepKind::FrontKeep: return "FrontKeep";
    case StepKind::FrontRotate: return "FrontRotate";
    case StepKind::BackKeep: return "BackKeep";
    case StepKind::BackRotate: return "BackRotate";
    default: return "Batched";
  }
}

// ---- planner -------------------------------------------------------------------------------
struct Option {
  int move;
  StepKind kind;
};

// The ways to contract axis `id` of layout `l`, with their cost (excluding later steps).
void options_for(const Layout& l, int id, index_t m, int elem, std::vector<Option>& opts,
                 std::vector<double>& costs) {
  opts.clear();
  costs.clear();
  index_t pre, n, post;
  split(l, id, pre, n, post);
  const index_t size = pre * n * post;
  auto add = [&](int move, StepKind kind, double c) {
    opts.push_back({move, kind});
    costs.push_back(c);
  };
  using K = StepKind;
  if (pre == 1) {
    add(0, K::FrontKeep, gemm_cost(K::FrontKeep, m, post, n, elem));
    add(0, K::FrontRotate, gemm_cost(K::FrontRotate, post, m, n, elem));
  }
  if (post == 1) {
    add(0, K::BackKeep, gemm_cost(K::BackKeep, pre, m, n, elem));
    add(0, K::BackRotate, gemm_cost(K::BackRotate, m, pre, n, elem));
  }
  if (pre != 1 && post != 1) {
    add(0, K::Batched, double(pre) * gemm_cost(K::Batched, m, post, n, elem));
    const double c = copy_cost(size, elem);
    const index_t rest = pre * post;
    // a permuting copy first; to the back only, since X A^T is the fastest of the four GEMMs
    for (K kind : {K::BackKeep, K::BackRotate}) add(1, kind, c + gemm_cost(kind, m, rest, n, elem));
  }
}

struct Search {
  int elem;
  std::vector<int> modes;          // in the order to try first
  std::vector<index_t> rows_of;    // per logical axis: m (when contracted)
  std::vector<int> final_sig;      // signature of the destination layout
  index_t final_size;
  bool fix_order;
  bool greedy;
  bool any_layout;
  double best = std::numeric_limits<double>::infinity();
  std::vector<ModeStep> cur, best_steps;
  bool best_copy_out = false;

  void run(const Layout& l, std::vector<char>& done, double cost) {
    if (cost >= best) return;
    if (cur.size() == modes.size()) {
      const bool copy_out = !any_layout && signature(l) != final_sig;
      const double total = cost + (copy_out ? copy_cost(final_size, elem) : 0.0);
      if (total < best) {
        best = total;
        best_steps = cur;
        best_copy_out = copy_out;
      }
      return;
    }
    std::vector<Option> opts;
    std::vector<double> costs;
    for (size_t j = 0; j < modes.size(); ++j) {
      if (done[j]) continue;
      const int id = modes[j];
      const index_t m = rows_of[id];
      options_for(l, id, m, elem, opts, costs);
      std::vector<size_t> idx(opts.size());
      std::iota(idx.begin(), idx.end(), size_t(0));
      std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return costs[a] < costs[b]; });
      if (greedy) idx.resize(1);  // many modes: the cheapest option of each step only
      done[j] = 1;
      for (size_t o : idx) {
        const Option& op = opts[o];
        Layout next = contracted(moved(l, id, op.move), id, m, op.kind);
        cur.push_back({id, op.move, op.kind});
        run(next, done, cost + costs[o]);
        cur.pop_back();
      }
      done[j] = 0;
      if (fix_order) break;  // only the next mode in the given order
    }
  }
};

// Physical order of a strided input when it is one dense block (axes longer than 1 only).
bool dense_order(int ndim, const index_t* shape, const index_t* strides, std::vector<int>& order) {
  order.clear();
  for (int i = 0; i < ndim; ++i)
    if (shape[i] != 1) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return strides[a] > strides[b]; });
  index_t expect = 1;
  for (int j = int(order.size()) - 1; j >= 0; --j) {
    const int a = order[j];
    if (strides[a] != expect) return false;
    expect *= shape[a];
  }
  return true;
}

Layout initial_layout(int ndim, const index_t* shape, const std::vector<char>& is_mode,
                      const std::vector<int>& order) {
  Layout l;
  // contracted axes of extent 1 may sit anywhere in a dense buffer: put them in front
  for (int i = 0; i < ndim; ++i)
    if (shape[i] == 1 && is_mode[i]) l.push_back({i, 1});
  for (int a : order) l.push_back({a, shape[a]});
  return l;
}

// ---- workspace -------------------------------------------------------------------------
// Scratch memory per thread, kept between calls up to kKeepWorkspace. Large blocks are aligned
// to 2 MiB and offered to transparent huge pages: a fresh 100 MB buffer otherwise costs tens of
// thousands of page faults, about 15% of a 256^3 chain.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
  unsigned char* get(size_t need) {
    if (need > bytes) {
      release();
      const size_t align = need >= (size_t(4) << 20) ? (size_t(2) << 20) : 64;
      const size_t rounded = (need + align - 1) / align * align;
#if defined(_WIN32)
      data = _aligned_malloc(rounded, align);
      if (!data) throw std::bad_alloc();
#else
      if (posix_memalign(&data, align, rounded) != 0) {
        data = nullptr;
        throw std::bad_alloc();
      }
#endif
#ifdef MADV_HUGEPAGE
      if (align > 64) madvise(data, rounded, MADV_HUGEPAGE);
#endif
      bytes = rounded;
    }
    return static_cast<unsigned char*>(data);
  }
  void release() {
#if defined(_WIN32)
    _aligned_free(data);
#else
    std::free(data);
#endif
    data = nullptr;
    bytes = 0;
  }
  void trim(size_t keep) {
    if (bytes > keep) release();
  }
  ~Workspace() { release(); }
};

thread_local Workspace t_workspace;
constexpr size_t kKeepWorkspace = size_t(256) << 20;

// ---- execution -------------------------------------------------------------------------
template <typename T>
struct Operand {
  const T* data;
  index_t ld;
  bool stored_transposed;  // the buffer holds A^T (n x m), row-major with row stride ld
};

template <typename T>
Operand<T> operand(const MatrixRef<T>& a, std::vector<std::vector<T>>& keep) {
  const index_t m = a.rows, n = a.cols;
  if (a.col_stride == 1 && (m == 1 || a.row_stride >= std::max<index_t>(n, 1)))
    return {a.data, m == 1 ? std::max<index_t>(n, 1) : a.row_stride, false};
  if (a.row_stride == 1 && (n == 1 || a.col_stride >= std::max<index_t>(m, 1)))
    return {a.data, n == 1 ? std::max<index_t>(m, 1) : a.col_stride, true};
  keep.emplace_back(size_t(m * n));
  T* c = keep.back().data();
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) c[i * n + j] = a.data[i * a.row_stride + j * a.col_stride];
  return {c, std::max<index_t>(n, 1), false};
}

template <typename T>
void dense_strides(const Layout& l, std::vector<index_t>& by_id, int ndim) {
  by_id.assign(ndim, 0);
  index_t s = 1;
  for (int i = int(l.size()) - 1; i >= 0; --i) {
    by_id[l[i].id] = s;
    s *= l[i].size;
  }
}

// Permuting copy between two dense buffers holding the same axes in different orders.
template <typename T>
void relayout(const Layout& from, const Layout& to, const T* src, T* dst, int ndim) {
  std::vector<index_t> sfrom, sto;
  dense_strides<T>(from, sfrom, ndim);
  dense_strides<T>(to, sto, ndim);
  std::vector<index_t> shape, ss, ds;
  for (const Ax& a : to) {
    shape.push_back(a.size);
    ss.push_back(sfrom[a.id]);
    ds.push_back(sto[a.id]);
  }
  strided_copy<T>(int(shape.size()), shape.data(), src, ss.data(), dst, ds.data());
}

template <typename T>
void run_step(const Layout& l, const ModeStep& st, index_t m, const Operand<T>& A, const T* x,
              T* y) {
  index_t pre, n, post;
  split(l, st.mode, pre, n, post);
  const bool t = A.stored_transposed;
  switch (st.kind) {
    case StepKind::FrontKeep:  // Y (m x post) = A X
      gemm<T>(t, false, m, post, n, T(1), A.data, A.ld, x, post, T(0), y, post);
      break;
    case StepKind::FrontRotate:  // Y (post x m) = X^T A^T
      gemm<T>(true, !t, post, m, n, T(1), x, post, A.data, A.ld, T(0), y, m);
      break;
    case StepKind::BackKeep:  // Y (pre x m) = X A^T
      gemm<T>(false, !t, pre, m, n, T(1), x, n, A.data, A.ld, T(0), y, m);
      break;
    case StepKind::BackRotate:  // Y (m x pre) = A X^T
      gemm<T>(t, true, m, pre, n, T(1), A.data, A.ld, x, n, T(0), y, pre);
      break;
    case StepKind::Batched:  // Y_i (m x post) = A X_i
      for (index_t i = 0; i < pre; ++i)
        gemm<T>(t, false, m, post, n, T(1), A.data, A.ld, x + i * n * post, post, T(0),
                y + i * m * post, post);
      break;
  }
}

void fail(const std::string& message) { throw ArgumentError(message); }

void check_chain(int ndim, const index_t* shape, int nmodes, const int* modes) {
  if (ndim < 1) fail("mode product: the tensor must have at least one axis");
  if (nmodes < 0 || nmodes > ndim) fail("mode product: more modes than tensor axes");
  std::vector<char> seen(ndim, 0);
  for (int j = 0; j < nmodes; ++j) {
    if (modes[j] < 0 || modes[j] >= ndim)
      fail("mode product: mode " + std::to_string(modes[j]) + " out of range for a " +
           std::to_string(ndim) + "-D tensor");
    if (seen[modes[j]]) fail("mode product: modes must be distinct");
    seen[modes[j]] = 1;
  }
  for (int i = 0; i < ndim; ++i)
    if (shape[i] < 0) fail("mode product: negative extent");
}

// Plans depend on sizes, the input's layout and the modes only: keep the last few per thread.
struct PlanCache {
  static constexpr size_t kSlots = 16;
  std::vector<std::vector<index_t>> keys;
  std::vector<ModePlan> plans;
  size_t next = 0;
  const ModePlan* find(const std::vector<index_t>& key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &plans[i];
    return nullptr;
  }
  void put(const std::vector<index_t>& key, const ModePlan& plan) {
    if (keys.size() < kSlots) {
      keys.push_back(key);
      plans.push_back(plan);
      return;
    }
    keys[next] = key;
    plans[next] = plan;
    next = (next + 1) % kSlots;
  }
};

thread_local PlanCache t_plans;

}  // namespace

// ---- strided copy ----------------------------------------------------------------------
namespace {

// Copy `len` contiguous elements (len is small and often 1 or the number of channels).
template <typename T>
inline void copy_run(const T* s, T* d, index_t len) {
  if (len == 1) {
    *d = *s;
  } else if (len >= 32) {
    std::memcpy(d, s, size_t(len) * sizeof(T));
  } else {
    for (index_t k = 0; k < len; ++k) d[k] = s[k];
  }
}

}  // namespace

template <typename T>
void strided_copy(int ndim, const index_t* shape, const T* src, const index_t* src_strides,
                  T* dst, const index_t* dst_strides) {
  struct Dim {
    index_t n, s, d;
  };
  std::vector<Dim> dims;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 0) return;
    if (shape[i] != 1) dims.push_back({shape[i], src_strides[i], dst_strides[i]});
  }
  // destination order (outermost first), then merge axes contiguous in both arrays
  std::stable_sort(dims.begin(), dims.end(),
                   [](const Dim& a, const Dim& b) { return std::llabs(a.d) > std::llabs(b.d); });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& p = merged.back();
      if (p.s == d.s * d.n && p.d == d.d * d.n) {
        p = {p.n * d.n, d.s, d.d};
        continue;
      }
    }
    merged.push_back(d);
  }
  dims.swap(merged);
  // A trailing axis contiguous in both arrays is copied as runs of `run` elements.
  index_t run = 1;
  if (!dims.empty() && dims.back().s == 1 && dims.back().d == 1) {
    run = dims.back().n;
    dims.pop_back();
  }
  if (dims.empty()) {
    copy_run(src, dst, run);
    return;
  }
  const int nd = int(dims.size());
  const int a = nd - 1;  // fastest for the destination
  int b = a;             // fastest for the source
  for (int i = 0; i < nd; ++i)
    if (std::llabs(dims[i].s) < std::llabs(dims[b].s)) b = i;
  const bool tiled = b != a && std::llabs(dims[b].s) == run;
  std::vector<Dim> outer;
  for (int i = 0; i < nd; ++i)
    if (i != a && !(tiled && i == b)) outer.push_back(dims[i]);
  const int no = int(outer.size());
  const Dim da = dims[a];
  const Dim db = tiled ? dims[b] : Dim{1, 0, 0};
  // tile so that one tile of both arrays stays in L1
  const index_t tile = std::max<index_t>(4, 64 / std::max<index_t>(1, run * index_t(sizeof(T)) / 4));
  std::vector<index_t> idx(no, 0);
  index_t so = 0, dof = 0;
  for (;;) {
    const T* s0 = src + so;
    T* d0 = dst + dof;
    if (!tiled) {
      for (index_t i = 0; i < da.n; ++i) copy_run(s0 + i * da.s, d0 + i * da.d, run);
    } else {
      for (index_t j0 = 0; j0 < db.n; j0 += tile) {
        const index_t j1 = std::min(db.n, j0 + tile);
        for (index_t i0 = 0; i0 < da.n; i0 += tile) {
          const index_t i1 = std::min(da.n, i0 + tile);
          for (index_t j = j0; j < j1; ++j) {
            const T* sp = s0 + j * db.s;
            T* dp = d0 + j * db.d;
            if (run == 1) {
              for (index_t i = i0; i < i1; ++i) dp[i * da.d] = sp[i * da.s];
            } else {
              for (index_t i = i0; i < i1; ++i) copy_run(sp + i * da.s, dp + i * da.d, run);
            }
          }
        }
      }
    }
    // odometer over the outer axes
    int k = no - 1;
    for (; k >= 0; --k) {
      so += outer[k].s;
      dof += outer[k].d;
      if (++idx[k] < outer[k].n) break;
      so -= outer[k].s * outer[k].n;
      dof -= outer[k].d * outer[k].n;
      idx[k] = 0;
    }
    if (k < 0) break;
  }
}

// ---- planner (public) ------------------------------------------------------------------
void set_mode_cost_model(double rate_f32, double half, double call, double copy_f32) {
  if (!(rate_f32 > 0 && half >= 0 && call >= 0 && copy_f32 >= 0))
    throw ArgumentError("set_mode_cost_model: rates and costs must be positive");
  CostModel& cm = cost_model();
  cm = CostModel{rate_f32, half, call, copy_f32};
  t_plans = PlanCache();
}

std::string ModePlan::describe() const {
  std::ostringstream o;
  if (copy_input) o << "copy_input; ";
  for (const ModeStep& s : steps) {
    o << s.mode << ":";
    if (s.move) o << "move_back+";
    o << kind_name(s.kind) << "; ";
  }
  if (copy_output) o << "copy_output; ";
  std::string r = o.str();
  if (r.size() >= 2) r.resize(r.size() - 2);
  return r;
}

ModePlan plan_mode_chain(int ndim, const index_t* shape, const index_t* strides, int nmodes,
                         const int* modes, const index_t* out_rows, int elem_size,
                         bool any_layout) {
  check_chain(ndim, shape, nmodes, modes);
  std::vector<char> is_mode(ndim, 0);
  std::vector<index_t> rows_of(ndim, 0), out_shape(shape, shape + ndim);
  for (int j = 0; j < nmodes; ++j) {
    is_mode[modes[j]] = 1;
    rows_of[modes[j]] = out_rows[j];
    out_shape[modes[j]] = out_rows[j];
  }
  index_t in_size = 1, out_size = 1;
  for (int i = 0; i < ndim; ++i) {
    in_size = checked_mul(in_size, shape[i], "mode product input");
    out_size = checked_mul(out_size, out_shape[i], "mode product output");
  }
  // Candidate starting layouts: the input as it lies (when it is one dense block), or a copy
  // in logical order, with the carried axes first, or with them last.
  struct Start {
    bool copy;
    std::vector<int> order;
  };
  std::vector<Start> starts;
  std::vector<int> order;
  if (dense_order(ndim, shape, strides, order)) starts.push_back({false, order});
  std::vector<int> logical, carried_first, carried_last;
  for (int i = 0; i < ndim; ++i)
    if (shape[i] != 1) logical.push_back(i);
  for (int pass = 0; pass < 2; ++pass)
    for (int i : logical)
      if (bool(is_mode[i]) == bool(pass)) carried_first.push_back(i);
  for (int pass = 1; pass >= 0; --pass)
    for (int i : logical)
      if (bool(is_mode[i]) == bool(pass)) carried_last.push_back(i);
  for (const auto& o : {logical, carried_first, carried_last}) {
    bool seen = false;
    for (const Start& st : starts) seen = seen || st.order == o;
    if (!seen) starts.push_back({true, o});
  }
  ModePlan plan;
  if (nmodes == 0 || in_size == 0 || out_size == 0) {
    plan.copy_input = starts[0].copy;
    plan.input_order = starts[0].order;
    return plan;
  }
  Search s;
  s.elem = elem_size;
  s.rows_of = rows_of;
  s.final_size = out_size;
  Layout final_layout;
  for (int i = 0; i < ndim; ++i) final_layout.push_back({i, out_shape[i]});
  s.final_sig = signature(final_layout);
  // Try first the order that minimises the flop count: a before b when
  // 1/m_a - 1/n_a > 1/m_b - 1/n_b (exchange argument on sum of size * m).
  s.modes.assign(modes, modes + nmodes);
  std::stable_sort(s.modes.begin(), s.modes.end(), [&](int a, int b) {
    return 1.0 / double(rows_of[a]) - 1.0 / double(shape[a]) >
           1.0 / double(rows_of[b]) - 1.0 / double(shape[b]);
  });
  s.fix_order = nmodes > 4;
  s.greedy = nmodes > 7;
  s.any_layout = any_layout;
  plan.cost = std::numeric_limits<double>::infinity();
  for (const Start& st : starts) {
    const double c0 = st.copy ? copy_cost(in_size, elem_size) : 0.0;
    s.best = plan.cost - c0;  // only plans that beat the best so far
    s.best_steps.clear();
    std::vector<char> done(nmodes, 0);
    s.run(initial_layout(ndim, shape, is_mode, st.order), done, 0.0);
    if (!s.best_steps.empty() && s.best + c0 < plan.cost) {
      plan.cost = s.best + c0;
      plan.copy_input = st.copy;
      plan.input_order = st.order;
      plan.steps = s.best_steps;
      plan.copy_output = s.best_copy_out;
    }
  }
  return plan;
}

// ---- executor --------------------------------------------------------------------------
std::vector<index_t> mode_chain_shape(int ndim, const index_t* shape, int nmodes, const int* modes,
                                      const index_t* rows, const index_t* cols) {
  check_chain(ndim, shape, nmodes, modes);
  std::vector<index_t> out(shape, shape + ndim);
  for (int j = 0; j < nmodes; ++j) {
    if (cols[j] != shape[modes[j]])
      fail("matrices[" + std::to_string(j) + "] has " + std::to_string(cols[j]) +
           " columns but T has " + std::to_string(shape[modes[j]]) + " along mode " +
           std::to_string(modes[j]) + ": it must have shape (m, " +
           std::to_string(shape[modes[j]]) + ")");
    if (rows[j] < 0) fail("matrices[" + std::to_string(j) + "] has a negative extent");
    out[modes[j]] = rows[j];
  }
  return out;
}

template <typename T>
void multi_mode_product(int ndim, const index_t* shape, const T* src, const index_t* src_strides,
                        int nmodes, const int* modes, const MatrixRef<T>* mats, T* dst,
                        int* out_order) {
  if (out_order)
    for (int i = 0; i < ndim; ++i) out_order[i] = i;
  std::vector<index_t> rows(nmodes), cols(nmodes);
  for (int j = 0; j < nmodes; ++j) {
    rows[j] = mats[j].rows;
    cols[j] = mats[j].cols;
  }
  const std::vector<index_t> out_shape =
      mode_chain_shape(ndim, shape, nmodes, modes, rows.data(), cols.data());
  index_t in_size = 1, out_size = 1;
  for (int i = 0; i < ndim; ++i) {
    in_size = checked_mul(in_size, shape[i], "mode product input");
    out_size = checked_mul(out_size, out_shape[i], "mode product output");
  }
  if (out_size == 0) return;
  if (in_size == 0) {  // sums over empty axes
    std::fill(dst, dst + out_size, T(0));
    return;
  }
  std::vector<index_t> dst_strides(ndim);
  {
    index_t s = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      dst_strides[i] = s;
      s *= out_shape[i];
    }
  }
  if (nmodes == 0) {
    strided_copy<T>(ndim, shape, src, src_strides, dst, dst_strides.data());
    return;
  }
  // cache key: element size, layout freedom, shape, strides, modes and their row counts
  const bool any_layout = out_order != nullptr;
  std::vector<index_t> key;
  key.reserve(3 + 2 * size_t(ndim) + 2 * size_t(nmodes));
  key.push_back(index_t(sizeof(T)));
  key.push_back(any_layout);
  key.push_back(ndim);
  key.insert(key.end(), shape, shape + ndim);
  key.insert(key.end(), src_strides, src_strides + ndim);
  for (int j = 0; j < nmodes; ++j) {
    key.push_back(modes[j]);
    key.push_back(rows[j]);
  }
  const ModePlan* cached = t_plans.find(key);
  if (!cached) {
    t_plans.put(key, plan_mode_chain(ndim, shape, src_strides, nmodes, modes, rows.data(),
                                     int(sizeof(T)), any_layout));
    cached = t_plans.find(key);
  }
  const ModePlan& plan = *cached;
  std::vector<std::vector<T>> keep;
  std::vector<Operand<T>> ops(ndim, Operand<T>{nullptr, 0, false});
  std::vector<index_t> rows_of(ndim, 0);
  for (int j = 0; j < nmodes; ++j) {
    ops[modes[j]] = operand(mats[j], keep);
    rows_of[modes[j]] = rows[j];
  }
  std::vector<char> is_mode(ndim, 0);
  for (int j = 0; j < nmodes; ++j) is_mode[modes[j]] = 1;

  // The chain as a list of writes, each reading the previous one's result (the first reads
  // src): an input copy, moves, GEMM steps, an output copy. The last write goes to dst.
  struct Write {
    int step;  // -1: input copy, -2: output copy, else the step index
    bool move;  // the permuting copy before step `step`
    index_t size;
  };
  std::vector<Write> writes;
  Layout l = initial_layout(ndim, shape, is_mode, plan.input_order);
  if (plan.copy_input) writes.push_back({-1, false, in_size});
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const ModeStep& st = plan.steps[i];
    if (st.move) writes.push_back({int(i), true, layout_size(l)});
    l = contracted(moved(l, st.mode, st.move), st.mode, rows_of[st.mode], st.kind);
    writes.push_back({int(i), false, layout_size(l)});
  }
  if (plan.copy_output) writes.push_back({-2, false, out_size});
  // Targets, from the last write backwards: dst (0) whenever the result fits there and the
  // next write does not read it, else scratch A (1) or B (2). Using dst halves the scratch.
  const size_t nw = writes.size();
  std::vector<int> target(nw, 0);
  index_t need[3] = {0, 0, 0};
  for (size_t j = nw - 1; j-- > 0;) {
    const int after = target[j + 1];
    int t = (after != 0 && writes[j].size <= out_size) ? 0 : (after == 1 ? 2 : 1);
    target[j] = t;
    need[t] = std::max(need[t], writes[j].size);
  }
  T* bufs[3] = {dst, nullptr, nullptr};
  if (need[1] + need[2] > 0) {
    const size_t a = (size_t(need[1]) * sizeof(T) + 63) / 64 * 64;
    unsigned char* base = t_workspace.get(a + size_t(need[2]) * sizeof(T) + 64);
    bufs[1] = reinterpret_cast<T*>(base);
    bufs[2] = reinterpret_cast<T*>(base + a);
  }
  // Run them.
  const T* cur = src;  // src is one dense block in the order `l` (positive strides) unless copied
  l = initial_layout(ndim, shape, is_mode, plan.input_order);
  for (size_t j = 0; j < nw; ++j) {
    const Write& w = writes[j];
    T* out = bufs[target[j]];
    if (w.step == -1) {
      std::vector<index_t> ds;
      dense_strides<T>(l, ds, ndim);
      strided_copy<T>(ndim, shape, src, src_strides, out, ds.data());
    } else if (w.step == -2) {
      Layout to;
      for (int i = 0; i < ndim; ++i)
        if (out_shape[i] != 1) to.push_back({i, out_shape[i]});
      relayout<T>(l, to, cur, out, ndim);
    } else {
      const ModeStep& st = plan.steps[w.step];
      if (w.move) {
        Layout to = moved(l, st.mode, st.move);
        relayout<T>(l, to, cur, out, ndim);
        l = to;
      } else {
        run_step<T>(l, st, rows_of[st.mode], ops[st.mode], cur, out);
        l = contracted(l, st.mode, rows_of[st.mode], st.kind);
      }
    }
    cur = out;
  }
  if (out_order && !plan.copy_output) {
    // the physical order of the result; axes not in the layout have extent 1
    std::vector<char> placed(ndim, 0);
    int k = 0;
    for (const Ax& a : l) {
      out_order[k++] = a.id;
      placed[a.id] = 1;
    }
    for (int i = 0; i < ndim; ++i)
      if (!placed[i]) out_order[k++] = i;
  }
  t_workspace.trim(kKeepWorkspace);
}

template void multi_mode_product<float>(int, const index_t*, const float*, const index_t*, int,
                                        const int*, const MatrixRef<float>*, float*, int*);
template void multi_mode_product<double>(int, const index_t*, const double*, const index_t*, int,
                                         const int*, const MatrixRef<double>*, double*, int*);
template void strided_copy<float>(int, const index_t*, const float*, const index_t*, float*,
                                  const index_t*);
template void strided_copy<double>(int, const index_t*, const double*, const index_t*, double*,
                                   const index_t*);

}  // namespace kronpe
