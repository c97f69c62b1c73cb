// The packed GEMM's algorithm (kronpe/packed_gemm.h): micro-kernel, tile kernel, packing and
// blocking, written once for every instruction set. packed_gemm.cpp includes this file once per
// set, each time inside that set's target region and namespace, after defining there the set's
// vector traits (the dispatch picks the kernel's shape, packed_gemm_impl's MR and NV):
//   Vec<T>: reg, mask, W (lanes), zero, bcast, load, store, stream (64-byte aligned rows),
//     mload / mstore (the first lanes only, as `first(n)` selects), fma, add; and TB, the side of
//     the blocks `transpose<ROWS>(src, rs, dst, ds)` turns (ROWS <= TB rows of TB values:
//     dst[j * ds + r] = src[r * rs + j]; ROWS < TB only as a whole sliver shorter than TB, with
//     ds == ROWS, or as a taller sliver's last R % TB rows), 0 where the set has none;
//     in_place_panels, up to how many B panels (of NR columns) an A with contiguous columns is
//     read in place rather than packed (packed_gemm_impl); optionally Half, the same traits for
//     vectors of half the width, which runs a last panel of at most W / 2 columns (tile_kernel).
// No include guard: it is meant to be included more than once, and includes nothing itself.

// The micro-kernel: the MR x NR tile (NR = NV vectors of V) of C at c (row stride ldc) gets
// (acc: plus) the product of an A sliver (kc x MR, ap[p * as + i] = A(i, p): packed with as = MR,
// or the operand itself when its rows are contiguous) and a B panel (kc rows of PANEL full
// vectors, bp[p * PANEL * Vec<T>::W + j] = B(p, j), of which the kernel reads the first NR
// values); only its first mr rows and nr columns are written. PF: each step of k prefetches the A
// row `ahead` elements past the sliver (the next slivers' values); stream: a whole tile (aligned
// rows) that is not accumulated goes out with streaming stores.
template <typename T, int MR, int NV, bool PF = false, int PANEL = NV, typename V = Vec<T>>
void micro_kernel(index_t kc, const T* __restrict ap, index_t as, const T* __restrict bp, T* c,
                  index_t ldc, int mr, int nr, bool acc, index_t ahead = 0, bool stream = false) {
  constexpr int W = V::W, NR = NV * W;
  typename V::reg r[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) r[i][v] = V::zero();
  for (index_t p = 0; p < kc; ++p) {
    typename V::reg b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = V::load(bp + v * W);
    if constexpr (PF) __builtin_prefetch(ap + ahead);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const typename V::reg a = V::bcast(ap + i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = V::fma(a, b[v], r[i][v]);
    }
    ap += as;
    bp += PANEL * Vec<T>::W;  // the packed panel's row: PANEL full vectors, of which the kernel reads NR values
  }
  if (mr == MR && nr == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        T* q = c + i * ldc + v * W;
        if (acc)
          V::store(q, V::add(V::load(q), r[i][v]));
        else if (stream)
          V::stream(q, r[i][v]);
        else
          V::store(q, r[i][v]);
      }
    return;
  }
  typename V::mask m[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) m[v] = V::first(nr - v * W);
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i >= mr) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      T* q = c + i * ldc + v * W;
      V::mstore(q, m[v], acc ? V::add(V::mload(q, m[v]), r[i][v]) : r[i][v]);
    }
  }
}

// One tile: micro_kernel, except that a last sliver of mr < MR rows runs the kernel of the next
// multiple of 4 rows below MR, if any (reading its packed sliver with the same stride `as`),
// rather than all MR rows on zero padding: a 256-row operand is 21 slivers of 12 and one of 4, and
// the 4-row kernel takes a third of the 12-row one's time (a 256^3 float32 GEMM 3% faster). Likewise
// a last panel of at most one vector's columns runs the one-vector kernel (reading the packed
// panel with its full row): a chain step of 100 output columns is 3 panels of 32 and one of 4.
// Where the set has Half, a last panel of at most W / 2 columns runs on half-width vectors: where
// a full vector's FMA takes two half-width passes (AMD's Zen 4 runs 512-bit FMAs on 256-bit units)
// that panel's FMAs take half as long, elsewhere as long (a D = 4 40 -> 40 chain's steps,
// 64000 x 40 x 40, end in a panel of 8 floats: 4% faster on Zen 4, the chain 4-6%).
// Every element of C gets the same operations in the same order, so the bits do not change.
template <typename T, int MR, int NV, bool PF, int PANEL, typename V = Vec<T>>
inline void rows_kernel(index_t kc, const T* __restrict ap, index_t as, const T* __restrict bp, T* c,
                        index_t ldc, int mr, int nr, bool acc, index_t ahead, bool stream) {
  if constexpr (MR > 4) {
    if (mr <= 4) return micro_kernel<T, 4, NV, PF, PANEL, V>(kc, ap, as, bp, c, ldc, mr, nr, acc, ahead, stream);
    if constexpr (MR > 8) {
      if (mr <= 8) return micro_kernel<T, 8, NV, PF, PANEL, V>(kc, ap, as, bp, c, ldc, mr, nr, acc, ahead, stream);
    }
  }
  micro_kernel<T, MR, NV, PF, PANEL, V>(kc, ap, as, bp, c, ldc, mr, nr, acc, ahead, stream);
}

// Vec<T>::Half where the set defines it (HalfOf<V>::value), else V itself.
template <typename V, typename = void>
struct HalfOf {
  static constexpr bool value = false;
  using type = V;
};
template <typename V>
struct HalfOf<V, std::void_t<typename V::Half>> {
  static constexpr bool value = true;
  using type = typename V::Half;
};

template <typename T, int MR, int NV, bool PF = false>
inline void tile_kernel(index_t kc, const T* __restrict ap, index_t as, const T* __restrict bp, T* c,
                        index_t ldc, int mr, int nr, bool acc, index_t ahead = 0, bool stream = false) {
  if constexpr (HalfOf<Vec<T>>::value) {
    using H = typename HalfOf<Vec<T>>::type;
    static_assert(2 * H::W == Vec<T>::W, "Half: vectors of half the width");
    if (nr <= H::W) return rows_kernel<T, MR, 1, PF, NV, H>(kc, ap, as, bp, c, ldc, mr, nr, acc, ahead, stream);
  }
  if constexpr (NV > 1) {
    if (nr <= Vec<T>::W) return rows_kernel<T, MR, 1, PF, NV>(kc, ap, as, bp, c, ldc, mr, nr, acc, ahead, stream);
  }
  rows_kernel<T, MR, NV, PF, NV>(kc, ap, as, bp, c, ldc, mr, nr, acc, ahead, stream);
}

// Rows of p a contiguous sliver copy takes at a time (pack_slivers): 4, 8 and 16 measured within
// noise of each other.
constexpr index_t kPackRunRows = 8;

// Slivers of R rows: rows [0, rows) x columns [0, kc) of a matrix whose element (i, p) lies at
// src[i * rs + p * cs] go to dst[(s * kc + p) * R + r] (i = s * R + r), zero past `rows`.
template <typename T, int R>
void pack_slivers(index_t rows, index_t kc, const T* src, index_t rs, index_t cs, T* dst) {
  if (rs == 1) {  // a sliver's rows are contiguous: the full slivers are copied kPackRunRows rows
    // of p at a time, each sliver's share of them before the next sliver's. Sliver by sliver, the
    // runs of a chain step's X^T (256 KiB apart) would share one L1 and one L2 set, and every
    // line come from L3 again for each sliver in it; row by row (p outer), the slivers' rows
    // written (kc R elements apart: 6 KiB at kc = 256, R = 6) would share two L1 sets, which
    // cost a 1536 x 256 x 256 product with A^T given 6% of its time (AVX2, one thread).
    const index_t full = rows / R;
    for (index_t p0 = 0; p0 < kc; p0 += kPackRunRows) {
      const index_t pe = std::min(kc, p0 + kPackRunRows);
      for (index_t s0 = 0; s0 < full; ++s0) {
        const T* q = src + p0 * cs + s0 * R;
        T* d = dst + (s0 * kc + p0) * R;
        // a fixed-size copy: whole vector moves (an element loop's are scalar: the compiler
        // cannot rule out that src and dst overlap)
        for (index_t p = p0; p < pe; ++p, q += cs, d += R) std::memcpy(d, q, R * sizeof(T));
      }
    }
    src += full * R;
    dst += full * kc * R;
    rows -= full * R;  // a last, partial sliver is zero-padded below
  }
  for (index_t s0 = 0; s0 < rows; s0 += R, dst += kc * R) {
    const index_t h = std::min<index_t>(R, rows - s0);
    const T* s = src + s0 * rs;
    constexpr int TB = Vec<T>::TB;
    if constexpr (TB > 0) {
      if (h == R && cs == 1 && rs != 1) {  // transposing rows contiguous along p: TB x TB blocks,
        // and R % TB x TB ones for the last rows (a sliver shorter than TB: one; a row-major A's
        // 6 or 12 rows; element by element, packing them took 4% of a 256^3 product)
        index_t p = 0;
        for (; p + TB <= kc; p += TB) {
          if constexpr (R < TB) {
            Vec<T>::template transpose<R>(s + p, rs, dst + p * R, R);
          } else {
            for (int r0 = 0; r0 + TB <= R; r0 += TB)
              Vec<T>::template transpose<TB>(s + r0 * rs + p, rs, dst + p * R + r0, R);
            if constexpr (R % TB != 0) {
              constexpr int r0 = R / TB * TB;
              Vec<T>::template transpose<R % TB>(s + r0 * rs + p, rs, dst + p * R + r0, R);
            }
          }
        }
        for (; p < kc; ++p)
          for (int r = 0; r < R; ++r) dst[p * R + r] = s[r * rs + p];
        continue;
      }
    }
    if (h == R) {  // transposing: R rows read along p, 8 at a time
      index_t p = 0;
      for (; p + 8 <= kc; p += 8)
#pragma GCC unroll 64
        for (int r = 0; r < R; ++r) {
          const T* q = s + r * rs + p * cs;
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j) dst[(p + j) * R + r] = q[j * cs];
        }
      for (; p < kc; ++p)
        for (int r = 0; r < R; ++r) dst[p * R + r] = s[r * rs + p * cs];
    } else {
      for (index_t p = 0; p < kc; ++p) {
        T* d = dst + p * R;
        for (index_t r = 0; r < h; ++r) d[r] = s[r * rs + p * cs];
        for (index_t r = h; r < R; ++r) d[r] = T(0);
      }
    }
  }
}

// A packed block of the big operand: a quarter of a 1 MiB L2.
constexpr index_t kBlockBytes = index_t(256) << 10;

// An A read in place from memory (not cache) is prefetched this many elements ahead, row by row
// of k, in a sliver's first micro-kernel call: its rows lie far apart (a chain step's X^T: one
// row per index of the contracted axis, 64 rows 1 MiB apart in a 64^4 step), too many streams
// for the hardware prefetchers: without it a 64^4 float32 chain's steps (262144 x 64 x 64, two
// threads) took 1.2x as long. Cached operands are left alone (16 MiB: half the development
// machine's L3).
constexpr index_t kPrefetchAhead = 32;
constexpr double kPrefetchFromBytes = double(16 << 20);

// The longest k block whose A slivers are read in place (see packed_gemm_impl).
constexpr index_t kDirectKc = 128;

// The cache lines of a strided block (`runs` runs of `run_bytes` contiguous bytes, `stride`
// bytes apart), prefetched a few at a time by step(n).
class LineWalk {
 public:
  LineWalk() = default;
  LineWalk(const void* start, index_t runs, index_t stride, index_t run_bytes) {
    const auto s = reinterpret_cast<std::uintptr_t>(start);
    base_ = reinterpret_cast<const char*>(s & ~std::uintptr_t(63));
    runs_ = runs;
    stride_ = stride;
    run_lines_ = index_t((s & 63) + std::uintptr_t(run_bytes) + 63) / 64;
  }
  index_t lines() const { return runs_ * run_lines_; }
  void step(index_t n) {
    for (; n > 0 && run_ < runs_; --n) {
      __builtin_prefetch(base_ + run_ * stride_ + line_ * 64, 0, 3);
      if (++line_ == run_lines_) {
        line_ = 0;
        ++run_;
      }
    }
  }

 private:
  const char* base_ = nullptr;
  index_t runs_ = 0, stride_ = 0, run_lines_ = 0;
  index_t run_ = 0, line_ = 0;  // the next line: run_, line_
};

template <typename T>
constexpr index_t kc_max() {
  return sizeof(T) == 4 ? 384 : 256;
}

// C = op(A) op(B) with the MR x (NV vectors) kernel. The operand with the longer free extent
// ("big") is packed block by block on each thread (or read in place: direct_a below); the other
// ("small") is packed whole once per call.
template <typename T, int MR, int NV>
void packed_gemm_impl(index_t M, index_t N, index_t K, const T* a, index_t rsa, index_t csa,
                      const T* b, index_t rsb, index_t csb, T* c, index_t ldc, int threads) {
  constexpr int NR = NV * Vec<T>::W;
  const index_t nk = (K + kc_max<T>() - 1) / kc_max<T>();
  const index_t kc0 = (K + nk - 1) / nk;  // every k block but the last has kc0 columns
  const bool big_a = M >= N;
  // the small operand: slivers (of A) or panels (of B) for every k block, one after another
  const index_t small_n = big_a ? N : M;
  const int small_r = big_a ? NR : MR;
  const index_t small_rows = (small_n + small_r - 1) / small_r * small_r;
  T* sp = static_cast<T*>(t_small.get(std::size_t(small_rows * K) * sizeof(T)));
  const index_t small_slivers = small_rows / small_r;
  // piece q of the small operand's packing: k block q / small_slivers, sliver q % small_slivers
  auto pack_small = [&](index_t q) {
    const index_t kb = q / small_slivers, s0 = q % small_slivers * small_r;
    const index_t p0 = kb * kc0, kc = std::min(kc0, K - p0);
    T* d = sp + small_rows * p0 + s0 * kc;
    const index_t h = std::min<index_t>(small_r, small_n - s0);
    if (big_a)
      pack_slivers<T, NR>(h, kc, b + p0 * rsb + s0 * csb, csb, rsb, d);
    else
      pack_slivers<T, MR>(h, kc, a + p0 * csa + s0 * rsa, rsa, csa, d);
  };
  const index_t small_pieces = nk * small_slivers;
  // the big operand in blocks of `bb` rows (a multiple of its sliver height)
  const index_t big_n = big_a ? M : N;
  const int big_r = big_a ? MR : NR;
  const index_t slivers = (big_n + big_r - 1) / big_r;
  const index_t max_per_block =
      std::max<index_t>(1, kBlockBytes / (kc0 * index_t(sizeof(T)) * big_r));
  const double flops = 2.0 * double(M) * double(N) * double(K);
  int nt = std::max(1, threads);
  nt = int(std::min<index_t>(nt, std::max<index_t>(1, index_t(flops / kPackedFlopsPerThread))));
  nt = int(std::min<index_t>(nt, slivers));
  // blocks per thread: four on one thread; eight in a team, for the dynamic schedule to even out
  // (four left a 512^2 step's 43 slivers in 7 blocks of 6 and one of 1, and the D=2 512 chain 8%
  // slower on two threads; on one thread eight gained nothing)
  const index_t per_thread = nt > 1 ? 8 : 4;
  const index_t per_block = std::min(
      max_per_block, std::max<index_t>(1, (slivers + per_thread * nt - 1) / (per_thread * nt)));
  const index_t nblocks = (slivers + per_block - 1) / per_block;
  const index_t bb = per_block * big_r;
  // An A with contiguous columns (X^T of a chain step) is read in place, without a pack pass,
  // when a sliver's kc rows of cache lines stay in L1 beside a B panel (kc <= kDirectKc): at
  // k = 32-128 the pass cost a quarter to a half of the time, at k = 256-512 packing wins.
  // Each B panel reads the sliver again; where those reads cost more than the pass, for a kernel
  // with few FMAs per row of the sliver, B is narrow enough only up to Vec<T>::in_place_panels.
  const long long panels_set = in_place_panels_setting();
  const index_t in_place_panels = panels_set >= 0 ? index_t(panels_set) : Vec<T>::in_place_panels;
  const bool direct_a = big_a && rsa == 1 && kc0 <= kDirectKc && (N + NR - 1) / NR <= in_place_panels;
  const bool prefetch = direct_a && double(M) * double(K) * sizeof(T) >= kPrefetchFromBytes;
  // A C that large is written with streaming stores (whole aligned cache lines, no read for
  // ownership) where a single k block writes it once: the next chain step reads it from memory
  // anyway (plain stores left the D = 4 64 -> 64 chain 12% slower; kronpe.ops allocates results
  // that large 64-byte aligned).
  const bool stream = nk == 1 && double(M) * double(N) * sizeof(T) >= kPrefetchFromBytes &&
                      reinterpret_cast<std::uintptr_t>(c) % 64 == 0 && (ldc * index_t(sizeof(T))) % 64 == 0;
  // In a team, the slivers of the small operand packed so far per k block (see the team below);
  // null on one thread.
  std::atomic<index_t>* packed = nullptr;
  // The big operand's lines of piece (blk, kb), prefetched while the piece before it computes:
  // its pack pass then reads cache, not memory (without it, a chain step's 65536 x 256 x 256
  // with A = X^T took 1.1x as long on one thread with the AVX2 kernels). An A read in place
  // prefetches its own lines (kPrefetchAhead).
  auto piece_lines = [&](index_t blk, index_t kb) -> LineWalk {
    if (direct_a || blk >= nblocks) return LineWalk();
    const index_t i0 = blk * bb, ib = std::min(bb, big_n - i0);
    const index_t p0 = kb * kc0, kc = std::min(kc0, K - p0);
    const index_t rs = big_a ? rsa : csb, cs = big_a ? csa : rsb;  // along the free extent, along k
    const T* src = big_a ? a + i0 * rsa + p0 * csa : b + i0 * csb + p0 * rsb;
    constexpr index_t E = sizeof(T);
    if (cs == 1) return LineWalk(src, ib, rs * E, kc * E);
    if (rs == 1) return LineWalk(src, kc, cs * E, ib * E);
    return LineWalk();
  };
  const index_t small_tiles = big_a ? (N + NR - 1) / NR : (M + MR - 1) / MR;  // per sliver or panel
  auto block = [&](index_t blk) {
    const index_t i0 = blk * bb, ib = std::min(bb, big_n - i0);
    T* bp = static_cast<T*>(t_big.get(std::size_t(bb * kc0) * sizeof(T)));
    for (index_t kb = 0; kb < nk; ++kb) {
      // the next piece: this block's next k block, or (a guess in a team, whose blocks are
      // handed out as threads ask) the block one team's width on
      LineWalk next = kb + 1 < nk ? piece_lines(blk, kb + 1) : piece_lines(blk + nt, 0);
      const index_t tiles = (ib + big_r - 1) / big_r * small_tiles;
      const index_t per_tile = (next.lines() + tiles - 1) / tiles;
      if (packed)  // every piece is taken: wait for those another thread is still packing (and
                   // give the core away while it waits long: that thread may be waiting for one)
        for (int spins = 0; packed[kb].load(std::memory_order_acquire) < small_slivers; ++spins) {
          if (spins < 4096)
            _mm_pause();
          else
            std::this_thread::yield();
        }
      const index_t p0 = kb * kc0, kc = std::min(kc0, K - p0);
      const T* spk = sp + small_rows * p0;
      const bool acc = kb > 0;
      if (big_a) {
        const T* ab = a + i0 * rsa + p0 * csa;
        if (!direct_a) pack_slivers<T, MR>(ib, kc, ab, rsa, csa, bp);
        for (index_t i = 0; i < ib; i += MR) {
          const int mr = int(std::min<index_t>(MR, ib - i));
          const T* ap = bp + i * kc;
          index_t as = MR;
          if (direct_a && mr == MR) {  // read in place
            ap = ab + i;
            as = csa;
          } else if (direct_a) {  // the last rows: a sliver of its own, zero-padded
            pack_slivers<T, MR>(mr, kc, ab + i, rsa, csa, bp);
            ap = bp;
          }
          for (index_t j = 0; j < N; j += NR) {
            const int nr = int(std::min<index_t>(NR, N - j));
            T* cj = c + (i0 + i) * ldc + j;
            if (prefetch && j == 0)
              tile_kernel<T, MR, NV, true>(kc, ap, as, spk + j * kc, cj, ldc, mr, nr, acc,
                                           kPrefetchAhead, stream);
            else
              tile_kernel<T, MR, NV>(kc, ap, as, spk + j * kc, cj, ldc, mr, nr, acc, 0, stream);
            next.step(per_tile);
          }
        }
      } else {
        pack_slivers<T, NR>(ib, kc, b + i0 * csb + p0 * rsb, csb, rsb, bp);
        for (index_t j = 0; j < ib; j += NR) {
          const T* bq = bp + j * kc;
          const int nr = int(std::min<index_t>(NR, ib - j));
          for (index_t i = 0; i < M; i += MR) {
            tile_kernel<T, MR, NV>(kc, spk + i * kc, MR, bq, c + i * ldc + i0 + j, ldc,
                                   int(std::min<index_t>(MR, M - i)), nr, acc, 0, stream);
            next.step(per_tile);
          }
        }
      }
    }
  };
#ifdef KRONPE_OPENMP
  if (nt > 1 && nblocks > 1) {
    // The small operand is packed by the team, then the blocks, both handed out piece by piece
    // from shared counters, with no barrier: a block waits only for the pieces of its k block
    // that another thread is still packing. A thread that starts late (its core taken by another
    // process: one scheduler tick, 4 ms, is common on a shared machine) finds the work done or
    // under way rather than holding the others at a barrier: a D=2 512^2 chain step costs the
    // caller's own time plus what is left, not the tick plus half the step. The pieces are packed by
    // the whole team, not by the caller alone before it (that idles the others for about a
    // quarter of a D=2 256 chain). Tiles and their sums are those of one thread.
    std::unique_ptr<std::atomic<index_t>[]> counts(new std::atomic<index_t>[std::size_t(nk)]);
    for (index_t kb = 0; kb < nk; ++kb) counts[kb].store(0, std::memory_order_relaxed);
    packed = counts.get();
    std::atomic<index_t> next_piece{0}, next_block{0};
    const TeamClock clock(nt);
#pragma omp parallel num_threads(nt)
    {
      clock.started();
      for (index_t q = next_piece.fetch_add(1); q < small_pieces; q = next_piece.fetch_add(1)) {
        pack_small(q);
        packed[q / small_slivers].fetch_add(1, std::memory_order_release);
      }
      for (index_t blk = next_block.fetch_add(1); blk < nblocks; blk = next_block.fetch_add(1)) block(blk);
      if (stream) _mm_sfence();  // before the team's closing barrier
      clock.finished();
    }
    return;
  }
#endif
  for (index_t q = 0; q < small_pieces; ++q) pack_small(q);
  for (index_t blk = 0; blk < nblocks; ++blk) block(blk);
  if (stream) _mm_sfence();  // the streamed lines ordered before whatever the caller does next
}
