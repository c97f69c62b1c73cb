// The mode-product planner, shared by the CPU and CUDA executors (kronpe/mode_product_plan.h):
// cost model, layout search, lowering to a ChainProgram (cached per thread), and the checks and
// helpers both executors use.
#include "kronpe/mode_product_plan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <sstream>


namespace kronpe {
namespace {

// ---- cost model (kronpe::ModeCostModel) ------------------------------------------------
ModeCostModel& cpu_model() {
  static ModeCostModel cm;
  return cm;
}
// The model of the CPU chains on kronpe's packed GEMM (kronpe/packed_gemm.h), measured on the
// 2-core AVX-512 EPYC of benches/README.md, one thread, float32: X^T A^T fastest (its tensor
// operand read in place at k <= 128: 190-210 Gflop/s at k = 64-128, ~175 packed at k = 256),
// X A^T and A X 5-20% slower, the transposing pack of A X^T 1.2x-1.8x slower at k = 64-128; a
// call costs under a microsecond.
//
// The AVX2 kernels (6 x 16 floats) on the same machine, held to them (KRONPE_SIMD=avx2), one
// thread: the same order at k = 32 and 256 and on short buffers, but at k = 64-128 with long
// buffers (a chain step's thousands of columns) A X^T leads, its transposed B packed in 8 x 8
// blocks: X^T A^T 1.05-1.17x its time, A X 1.03-1.09x, X A^T 1.03-1.06x (float32; median of
// three measurements of the four layouts per shape class, kronpe._core._tuning.mode_layout_table;
// in float64 the four layouts lie within 5% of each other there, A X^T among them).
ModeCostModel& packed_model(bool avx2) {
  static ModeCostModel wide = [] {
    ModeCostModel m;
    m.rate_f32 = 170e9;
    m.call = 0.5e-6;
    const double penalty[5] = {0.15, 0.0, 0.15, 0.6, 0.2};
    for (int i = 0; i < 5; ++i) m.layout_penalty[i] = penalty[i];
    m.id = 3;
    return m;
  }();
  static ModeCostModel narrow = [] {
    ModeCostModel m = wide;
    m.rate_f32 = 100e9;
    m.id = 4;
    m.band_k_lo = 64;
    m.band_k_hi = 128;
    m.band_rest = 1024;
    const double band[5] = {0.07, 0.12, 0.06, 0.0, 0.2};
    for (int i = 0; i < 5; ++i) m.band_penalty[i] = band[i];
    return m;
  }();
  return avx2 ? narrow : wide;
}
std::atomic<long long> g_cpu_model_version{0};

double eff(const ModeCostModel& cm, index_t x) { return double(x) / (double(x) + cm.half); }

double gemm_flops_cost(const ModeCostModel& cm, index_t m, index_t n, index_t k, int elem_size) {
  const double rate = cm.rate_f32 * (elem_size == 4 ? 1.0 : 0.5);
  return 2.0 * double(m) * double(n) * double(k) / (rate * eff(cm, m) * eff(cm, n) * eff(cm, k));
}

// How much slower than the best layout a step of `kind` runs: the matrix has `rows` rows, the
// buffer `rest` other columns, k is contracted.
double slowdown(const ModeCostModel& cm, StepKind kind, index_t rows, index_t k, index_t rest,
                int elem_size) {
  if (cm.layout_factor) return cm.layout_factor(kind, rows, k, rest, elem_size);
  const bool band = k >= cm.band_k_lo && k <= cm.band_k_hi && rest >= cm.band_rest;
  const double* penalty = band ? cm.band_penalty : cm.layout_penalty;
  return 1.0 + penalty[int(kind)] * 64.0 / double(std::max<index_t>(k, 1));
}

// One GEMM of layout `kind`: (m x k) times (k x n) in the row-major sense, k contracted.
double gemm_cost(const ModeCostModel& cm, StepKind kind, index_t m, index_t n, index_t k,
                 int elem_size) {
  // the chain matrix is the (rows x k) side: M for FrontKeep / BackRotate, else N
  const bool left = kind == StepKind::FrontKeep || kind == StepKind::BackRotate;
  const index_t rows = left ? m : n, rest = left ? n : m;
  return gemm_flops_cost(cm, m, n, k, elem_size) * slowdown(cm, kind, rows, k, rest, elem_size) +
         cm.call;
}

double batched_cost(const ModeCostModel& cm, index_t batch, index_t m, index_t n, index_t k,
                    int elem_size) {
  const double f = gemm_flops_cost(cm, m, n, k, elem_size) *
                   slowdown(cm, StepKind::Batched, m, k, n, elem_size);
  if (cm.batched_one_call) return double(batch) * f + cm.call;
  return double(batch) * (f + cm.call);
}

double copy_cost(const ModeCostModel& cm, index_t size, int elem_size) {
  return double(size) * cm.copy_f32 * (elem_size == 4 ? 1.0 : 1.6);
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

// pre, n, post of axis `id` in a dense layout (saturated: the planner only compares costs, and an
// order whose intermediates overflow is never the cheapest; lowering checks what it runs).
void split(const Layout& l, int id, index_t& pre, index_t& n, index_t& post) {
  const int p = position(l, id);
  pre = 1;
  post = 1;
  for (int i = 0; i < p; ++i) pre = saturating_mul(pre, l[i].size);
  n = l[p].size;
  for (size_t i = p + 1; i < l.size(); ++i) post = saturating_mul(post, l[i].size);
}

Layout moved(const Layout& l, int id, int move) {
  if (move == 0) return l;
  const int p = position(l, id);
  Layout out;
  out.reserve(l.size());
  if (move == 1) out.push_back(l[p]);
  for (size_t i = 0; i < l.size(); ++i)
    if (int(i) != p) out.push_back(l[i]);
  if (move == 2) out.push_back(l[p]);
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
void options_for(const ModeCostModel& cm, const Layout& l, int id, index_t m, int elem,
                 std::vector<Option>& opts, std::vector<double>& costs) {
  opts.clear();
  costs.clear();
  index_t pre, n, post;
  split(l, id, pre, n, post);
  const index_t size = saturating_mul(saturating_mul(pre, n), post);
  auto add = [&](int move, StepKind kind, double c) {
    opts.push_back({move, kind});
    costs.push_back(c);
  };
  using K = StepKind;
  if (pre == 1) {
    add(0, K::FrontKeep, gemm_cost(cm, K::FrontKeep, m, post, n, elem));
    add(0, K::FrontRotate, gemm_cost(cm, K::FrontRotate, post, m, n, elem));
  }
  if (post == 1) {
    add(0, K::BackKeep, gemm_cost(cm, K::BackKeep, pre, m, n, elem));
    add(0, K::BackRotate, gemm_cost(cm, K::BackRotate, m, pre, n, elem));
  }
  if (pre != 1 && post != 1) {
    add(0, StepKind::Batched, batched_cost(cm, pre, m, post, n, elem));
    const double c = copy_cost(cm, size, elem);
    const index_t rest = saturating_mul(pre, post);
    add(1, K::FrontKeep, c + gemm_cost(cm, K::FrontKeep, m, rest, n, elem));
    add(1, K::FrontRotate, c + gemm_cost(cm, K::FrontRotate, rest, m, n, elem));
    add(2, K::BackKeep, c + gemm_cost(cm, K::BackKeep, rest, m, n, elem));
    add(2, K::BackRotate, c + gemm_cost(cm, K::BackRotate, m, rest, n, elem));
  }
}

struct Search {
  const ModeCostModel* cm;
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
      const double total = cost + (copy_out ? copy_cost(*cm, final_size, elem) : 0.0);
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
      options_for(*cm, l, id, m, elem, opts, costs);
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

void dense_strides(const Layout& l, std::vector<index_t>& by_id, int ndim) {
  by_id.assign(ndim, 0);
  index_t s = 1;
  for (int i = int(l.size()) - 1; i >= 0; --i) {
    by_id[l[i].id] = s;
    s *= l[i].size;
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

}  // namespace

// ---- copy axes (for the backends' strided copies) ----------------------------------------
bool copy_dims(int ndim, const index_t* shape, const index_t* src_strides,
               const index_t* dst_strides, std::vector<CopyDim>& dims) {
  dims.clear();
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 0) {
      dims.clear();
      return false;
    }
    if (shape[i] != 1) dims.push_back({shape[i], src_strides[i], dst_strides[i]});
  }
  // destination order (outermost first), then merge axes contiguous in both arrays
  std::stable_sort(dims.begin(), dims.end(), [](const CopyDim& a, const CopyDim& b) {
    return std::llabs(a.d) > std::llabs(b.d);
  });
  std::vector<CopyDim> merged;
  for (const CopyDim& d : dims) {
    if (!merged.empty()) {
      CopyDim& p = merged.back();
      if (p.s == d.s * d.n && p.d == d.d * d.n) {
        p = {p.n * d.n, d.s, d.d};
        continue;
      }
    }
    merged.push_back(d);
  }
  dims.swap(merged);
  return true;
}

// ---- planner (public) ------------------------------------------------------------------
void set_mode_cost_model(double rate_f32, double half, double call, double copy_f32) {
  if (!(rate_f32 > 0 && half >= 0 && call >= 0 && copy_f32 >= 0))
    throw ArgumentError("set_mode_cost_model: rates and costs must be positive");
  ModeCostModel& cm = cpu_model();
  cm.rate_f32 = rate_f32;
  cm.half = half;
  cm.call = call;
  cm.copy_f32 = copy_f32;
  g_cpu_model_version.fetch_add(1);  // every thread's cached programs are stale now
}

void set_mode_layout_penalty(const double* penalty) {
  for (int i = 0; i < 5; ++i)
    if (!(penalty[i] >= 0 && penalty[i] < 1e6))
      throw ArgumentError("set_mode_layout_penalty: penalties must be finite and >= 0");
  ModeCostModel& cm = cpu_model();
  for (int i = 0; i < 5; ++i) cm.layout_penalty[i] = penalty[i];
  g_cpu_model_version.fetch_add(1);
}

void set_mode_layout_factor(double (*factor)(StepKind, index_t, index_t, index_t, int)) {
  cpu_model().layout_factor = factor;
  packed_model(false).layout_factor = factor;
  packed_model(true).layout_factor = factor;
  g_cpu_model_version.fetch_add(1);
}

const ModeCostModel& cpu_cost_model() { return cpu_model(); }

const ModeCostModel& packed_cpu_cost_model(bool avx2) { return packed_model(avx2); }

const ModeCostModel& library_cost_model() {
  static const ModeCostModel cm = [] {
    // Measured with torch 2.13's MKL on the 2-core AVX-512 machine, one thread: ~100 Gflop/s
    // float32 at 256 x 768 x 256 whatever the operands' layout (NN, NT, TN within 3%), a
    // permuting copy at ~0.5 ns per float32 element, ~8 us per torch call from Python.
    ModeCostModel m;
    m.rate_f32 = 100e9;
    m.call = 8e-6;
    m.copy_f32 = 0.5e-9;
    m.batched_one_call = true;
    for (double& p : m.layout_penalty) p = 0.0;
    m.id = 2;
    return m;
  }();
  return cm;
}

std::string ModePlan::describe() const {
  std::ostringstream o;
  if (copy_input) o << "copy_input; ";
  for (const ModeStep& s : steps) {
    o << s.mode << ":";
    if (s.move == 1) o << "move_front+";
    if (s.move == 2) o << "move_back+";
    o << kind_name(s.kind) << "; ";
  }
  if (copy_output) o << "copy_output; ";
  std::string r = o.str();
  if (r.size() >= 2) r.resize(r.size() - 2);
  return r;
}

ModePlan plan_mode_chain(int ndim, const index_t* shape, const index_t* strides, int nmodes,
                         const int* modes, const index_t* out_rows, int elem_size,
                         bool any_layout, const ModeCostModel* model) {
  check_chain(ndim, shape, nmodes, modes);
  const ModeCostModel& cm = model ? *model : cpu_model();
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
  s.cm = &cm;
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
    const double c0 = st.copy ? copy_cost(cm, in_size, elem_size) : 0.0;
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

// ---- lowering ----------------------------------------------------------------------------
OperandLayout operand_layout(index_t rows, index_t cols, index_t row_stride, index_t col_stride) {
  const index_t m = rows, n = cols;
  if (col_stride == 1 && (m == 1 || row_stride >= std::max<index_t>(n, 1)))
    return {true, false, m == 1 ? std::max<index_t>(n, 1) : row_stride};
  if (row_stride == 1 && (n == 1 || col_stride >= std::max<index_t>(m, 1)))
    return {true, true, n == 1 ? std::max<index_t>(m, 1) : col_stride};
  return {false, false, std::max<index_t>(n, 1)};  // after a dense row-major copy
}

namespace {

ChainOp copy_op(ChainBuffer src, ChainBuffer dst, std::vector<index_t> shape,
                std::vector<index_t> src_strides, std::vector<index_t> dst_strides) {
  ChainOp op;
  op.kind = ChainOp::copy;
  op.src = src;
  op.dst = dst;
  op.shape = std::move(shape);
  op.src_strides = std::move(src_strides);
  op.dst_strides = std::move(dst_strides);
  return op;
}

// The permuting copy between two dense layouts holding the same axes.
ChainOp relayout_op(const Layout& from, const Layout& to, ChainBuffer src, ChainBuffer dst,
                    int ndim) {
  std::vector<index_t> sfrom, sto;
  dense_strides(from, sfrom, ndim);
  dense_strides(to, sto, ndim);
  std::vector<index_t> shape, ss, ds;
  for (const Ax& a : to) {
    shape.push_back(a.size);
    ss.push_back(sfrom[a.id]);
    ds.push_back(sto[a.id]);
  }
  return copy_op(src, dst, shape, ss, ds);
}

// The GEMM(s) of one step on layout l (after any move).
ChainOp step_op(const Layout& l, const ModeStep& st, int matrix, index_t m, ChainBuffer src,
                ChainBuffer dst) {
  index_t pre, n, post;
  split(l, st.mode, pre, n, post);
  ChainOp op;
  op.kind = ChainOp::gemm;
  op.src = src;
  op.dst = dst;
  op.matrix = matrix;
  op.K = n;
  switch (st.kind) {
    case StepKind::FrontKeep:  // Y (m x post) = A X
      op.matrix_left = true, op.matrix_trans = false, op.buffer_trans = false;
      op.M = m, op.N = post, op.ld_buffer = post, op.ldc = post;
      break;
    case StepKind::FrontRotate:  // Y (post x m) = X^T A^T
      op.matrix_left = false, op.matrix_trans = true, op.buffer_trans = true;
      op.M = post, op.N = m, op.ld_buffer = post, op.ldc = m;
      break;
    case StepKind::BackKeep:  // Y (pre x m) = X A^T
      op.matrix_left = false, op.matrix_trans = true, op.buffer_trans = false;
      op.M = pre, op.N = m, op.ld_buffer = n, op.ldc = m;
      break;
    case StepKind::BackRotate:  // Y (m x pre) = A X^T
      op.matrix_left = true, op.matrix_trans = false, op.buffer_trans = true;
      op.M = m, op.N = pre, op.ld_buffer = n, op.ldc = pre;
      break;
    case StepKind::Batched:  // Y_i (m x post) = A X_i
      op.matrix_left = true, op.matrix_trans = false, op.buffer_trans = false;
      op.M = m, op.N = post, op.ld_buffer = post, op.ldc = post;
      op.batch = pre, op.stride_buffer = n * post, op.stride_c = m * post;
      break;
  }
  return op;
}

ChainProgram lower(const ModePlan& plan, int ndim, const index_t* shape, const index_t* strides,
                   int nmodes, const int* modes, const index_t* rows,
                   const std::vector<index_t>& out_shape, index_t in_size, index_t out_size) {
  ChainProgram prog;
  prog.in_size = in_size;
  prog.out_size = out_size;
  prog.out_order.resize(size_t(ndim));
  std::iota(prog.out_order.begin(), prog.out_order.end(), 0);
  if (out_size == 0 || in_size == 0) return prog;
  std::vector<index_t> c_strides(ndim);
  {
    index_t st = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      c_strides[i] = st;
      st *= out_shape[i];
    }
  }
  if (nmodes == 0) {
    prog.ops.push_back(copy_op(ChainBuffer::input, ChainBuffer::output,
                               std::vector<index_t>(shape, shape + ndim),
                               std::vector<index_t>(strides, strides + ndim), c_strides));
    return prog;
  }
  std::vector<char> is_mode(ndim, 0);
  std::vector<index_t> rows_of(ndim, 0);
  std::vector<int> matrix_of(ndim, -1);
  for (int j = 0; j < nmodes; ++j) {
    is_mode[modes[j]] = 1;
    rows_of[modes[j]] = rows[j];
    matrix_of[modes[j]] = j;
  }
  Layout l = initial_layout(ndim, shape, is_mode, plan.input_order);
  auto next_work = [](ChainBuffer b) {
    return b == ChainBuffer::work0 ? ChainBuffer::work1 : ChainBuffer::work0;
  };
  ChainBuffer cur = ChainBuffer::input, free_buf = ChainBuffer::work0;
  index_t ws = 0;
  if (plan.copy_input) {
    std::vector<index_t> ds;
    dense_strides(l, ds, ndim);
    prog.ops.push_back(copy_op(ChainBuffer::input, free_buf,
                               std::vector<index_t>(shape, shape + ndim),
                               std::vector<index_t>(strides, strides + ndim), ds));
    ws = in_size;
    cur = free_buf;
    free_buf = next_work(free_buf);
  }
  // else: the input is one dense block in the order `l` with positive strides, so its base is
  // the element with all indices 0 and the GEMMs read it in place.
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const ModeStep& st = plan.steps[i];
    if (st.move) {
      Layout to = moved(l, st.mode, st.move);
      prog.ops.push_back(relayout_op(l, to, cur, free_buf, ndim));
      ws = std::max(ws, layout_size(l));
      cur = free_buf;
      free_buf = next_work(free_buf);
      l = to;
    }
    const bool last = i + 1 == plan.steps.size();
    const ChainBuffer out = last && !plan.copy_output ? ChainBuffer::output : free_buf;
    prog.ops.push_back(step_op(l, st, matrix_of[st.mode], rows_of[st.mode], cur, out));
    l = contracted(l, st.mode, rows_of[st.mode], st.kind);
    if (out != ChainBuffer::output) ws = std::max(ws, layout_size(l));
    cur = out;
    free_buf = next_work(cur == ChainBuffer::output ? free_buf : cur);
  }
  if (plan.copy_output) {
    Layout to;
    for (int i = 0; i < ndim; ++i)
      if (out_shape[i] != 1) to.push_back({i, out_shape[i]});
    prog.ops.push_back(relayout_op(l, to, cur, ChainBuffer::output, ndim));
  } else {
    // the physical order of the result; axes not in the layout have extent 1
    std::vector<char> placed(ndim, 0);
    int k = 0;
    for (const Ax& a : l) {
      prog.out_order[k++] = a.id;
      placed[a.id] = 1;
    }
    for (int i = 0; i < ndim; ++i)
      if (!placed[i]) prog.out_order[k++] = i;
  }
  prog.workspace = ws;
  return prog;
}

// Programs depend on sizes, the input's layout, the modes and the model only: keep the last few
// per thread.
struct ProgramCache {
  static constexpr size_t kSlots = 16;
  std::vector<std::vector<index_t>> keys;
  std::vector<ChainProgram> programs;
  size_t next = 0;
  const ChainProgram* find(const std::vector<index_t>& key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &programs[i];
    return nullptr;
  }
  void put(const std::vector<index_t>& key, ChainProgram prog) {
    if (keys.size() < kSlots) {
      keys.push_back(key);
      programs.push_back(std::move(prog));
      return;
    }
    keys[next] = key;
    programs[next] = std::move(prog);
    next = (next + 1) % kSlots;
  }
};

thread_local ProgramCache t_programs;

}  // namespace

void mode_chain_programs_clear() { t_programs = ProgramCache{}; }

ChainProgram mode_chain_program(int ndim, const index_t* shape, const index_t* strides,
                                int nmodes, const int* modes, const index_t* out_rows,
                                int elem_size, bool any_layout, const ModeCostModel& model) {
  check_chain(ndim, shape, nmodes, modes);
  std::vector<index_t> out_shape(shape, shape + ndim);
  for (int j = 0; j < nmodes; ++j) {
    if (out_rows[j] < 0) fail("mode product: negative matrix extent");
    out_shape[modes[j]] = out_rows[j];
  }
  index_t in_size = 1, out_size = 1;
  for (int i = 0; i < ndim; ++i) {
    in_size = checked_mul(in_size, shape[i], "mode product input");
    out_size = checked_mul(out_size, out_shape[i], "mode product output");
  }
  // cache key: model, element size, layout freedom, shape, strides, modes and their row counts
  std::vector<index_t> key;
  key.reserve(5 + 2 * size_t(ndim) + 2 * size_t(nmodes));
  key.push_back(model.id);
  const bool cpu = &model == &cpu_model() || &model == &packed_model(false) || &model == &packed_model(true);
  key.push_back(cpu ? index_t(g_cpu_model_version.load()) : 0);
  key.push_back(index_t(elem_size));
  key.push_back(any_layout);
  key.push_back(ndim);
  key.insert(key.end(), shape, shape + ndim);
  key.insert(key.end(), strides, strides + ndim);
  for (int j = 0; j < nmodes; ++j) {
    key.push_back(modes[j]);
    key.push_back(out_rows[j]);
  }
  if (const ChainProgram* cached = t_programs.find(key)) return *cached;
  const ModePlan plan = plan_mode_chain(ndim, shape, strides, nmodes, modes, out_rows, elem_size,
                                        any_layout, &model);
  ChainProgram prog =
      lower(plan, ndim, shape, strides, nmodes, modes, out_rows, out_shape, in_size, out_size);
  t_programs.put(key, prog);
  return prog;
}

// ---- chain checks and scratch ---------------------------------------------------------
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

int chain_work_in_output(const ChainProgram& prog) {
  if (prog.workspace <= 0 || prog.workspace > prog.out_size) return -1;
  for (int w = 0; w < 2; ++w) {
    const ChainBuffer work = w == 0 ? ChainBuffer::work0 : ChainBuffer::work1;
    bool paired = false;
    for (const ChainOp& op : prog.ops)
      paired = paired || (op.src == work && op.dst == ChainBuffer::output) ||
               (op.src == ChainBuffer::output && op.dst == work);
    if (!paired) return w;
  }
  return -1;
}

std::size_t chain_workspace_bytes(const ChainProgram& prog, int nmodes, const index_t* rows,
                                  const index_t* cols, const index_t* mat_strides, int elem_size) {
  if (prog.ops.empty()) return 0;
  const std::size_t elem = std::size_t(elem_size);
  const std::size_t buffers = chain_work_in_output(prog) >= 0 ? 1 : 2;
  const index_t work = checked_mul(prog.workspace, elem_size, "mode product workspace");
  std::size_t bytes = buffers * chain_aligned(std::size_t(work));
  for (int j = 0; j < nmodes; ++j)
    if (!operand_layout(rows[j], cols[j], mat_strides[2 * j], mat_strides[2 * j + 1]).in_place)
      bytes += chain_aligned(std::size_t(checked_mul(rows[j], cols[j], "mode product matrix")) * elem);
  return bytes;
}

}  // namespace kronpe
