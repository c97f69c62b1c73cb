// Experiment (issue 14): the stored blend transpose of dense rows (blend.cu's
// transpose_stored_flat_kernel) is bound by the L2's atomic units (ncu on an H200: L2 throughput
// 85%, DRAM 43%; 52% of the copy bandwidth in bench_cuda.py against the 60% target). Hopper adds
// 8- and 16-byte vector atomics on global memory: a 2-D point's corners (r, r+1, r+M, r+M+1) come
// in two adjacent pairs, and a pair inside one aligned window of 2 or 4 floats is one atomic
// instead of two. This program times the variants on the bench's data (8M points, 513^2 grid,
// 4 nonzeros per point, int64 indices, float64 weights, float32 values), each checked against a
// float64 host reference:
//   flat      one lane per nonzero, scalar atomics (kronpe's kernel)
//   point     one lane per point, scalar atomics
//   pair2     one lane per adjacent pair (16-byte loads), float2 atomic when the pair is 8-byte
//             aligned, else two scalars
//   pair4     one lane per pair, one float4 atomic when the pair lies in an aligned 16-byte window
//             (3 pairs in 4), else a float2 or two scalars
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/ta benches/cuda_experiments/transpose_atomics.cu && /tmp/ta
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

using idx_t = long long;
constexpr int kBlock = 256;
constexpr int M = 513;  // grid nodes per axis

__host__ __device__ inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__host__ __device__ inline double unit(std::uint64_t x) { return double(mix(x) >> 11) * 0x1.0p-53; }

// points uniform in the grid's cells: corners r, r+1, r+M, r+M+1 with random weights
__global__ void make_data(idx_t P, std::uint64_t seed, idx_t* idx, double* wts, float* vals) {
  for (idx_t p = blockIdx.x * idx_t(blockDim.x) + threadIdx.x; p < P; p += idx_t(gridDim.x) * blockDim.x) {
    const int i = int(unit(seed + 4 * p) * (M - 1)), j = int(unit(seed + 4 * p + 1) * (M - 1));
    const idx_t r = idx_t(i) * M + j;
    idx[4 * p] = r, idx[4 * p + 1] = r + 1, idx[4 * p + 2] = r + M, idx[4 * p + 3] = r + M + 1;
    for (int s = 0; s < 4; ++s) wts[4 * p + s] = unit(seed ^ (0x1234567ull + 8 * p + s));
    vals[p] = float(2 * unit(seed + 4 * p + 2) - 1);
  }
}

__global__ void flat(const idx_t* __restrict__ idx, const double* __restrict__ wts, idx_t nnz, idx_t P,
                     const float* __restrict__ vals, float* out) {
  for (idx_t e = blockIdx.x * idx_t(blockDim.x) + threadIdx.x; e < P * nnz; e += idx_t(gridDim.x) * blockDim.x) {
    const idx_t p = e / nnz;
    atomicAdd(out + idx[e], float(wts[e] * double(vals[p])));
  }
}

__global__ void point(const idx_t* __restrict__ idx, const double* __restrict__ wts, idx_t P,
                      const float* __restrict__ vals, float* out) {
  for (idx_t p = blockIdx.x * idx_t(blockDim.x) + threadIdx.x; p < P; p += idx_t(gridDim.x) * blockDim.x) {
    const longlong2 i01 = reinterpret_cast<const longlong2*>(idx)[2 * p];
    const longlong2 i23 = reinterpret_cast<const longlong2*>(idx)[2 * p + 1];
    const double2 w01 = reinterpret_cast<const double2*>(wts)[2 * p];
    const double2 w23 = reinterpret_cast<const double2*>(wts)[2 * p + 1];
    const double v = vals[p];
    atomicAdd(out + i01.x, float(w01.x * v));
    atomicAdd(out + i01.y, float(w01.y * v));
    atomicAdd(out + i23.x, float(w23.x * v));
    atomicAdd(out + i23.y, float(w23.y * v));
  }
}

// one adjacent-or-not pair (r0, a0), (r1, a1): Window = 2 or 4 floats
template <int Window>
__device__ inline void add_pair(float* out, idx_t r0, float a0, idx_t r1, float a1) {
#if __CUDA_ARCH__ >= 900
  if (r1 == r0 + 1) {
    const int o = int(r0 & (Window - 1));
    if (Window == 4 && o != 3) {
      // o in {0, 1, 2}: a0 at o, a1 at o + 1
      const float4 v = o == 0 ? make_float4(a0, a1, 0.f, 0.f)
                               : o == 1 ? make_float4(0.f, a0, a1, 0.f) : make_float4(0.f, 0.f, a0, a1);
      atomicAdd(reinterpret_cast<float4*>(out + (r0 - o)), v);
      return;
    }
    if (o % 2 == 0) {
      atomicAdd(reinterpret_cast<float2*>(out + r0), make_float2(a0, a1));
      return;
    }
  }
#endif
  atomicAdd(out + r0, a0);
  atomicAdd(out + r1, a1);
}

template <int Window>
__global__ void pair(const idx_t* __restrict__ idx, const double* __restrict__ wts, idx_t P,
                     const float* __restrict__ vals, float* out) {
  for (idx_t q = blockIdx.x * idx_t(blockDim.x) + threadIdx.x; q < 2 * P; q += idx_t(gridDim.x) * blockDim.x) {
    const longlong2 i = reinterpret_cast<const longlong2*>(idx)[q];
    const double2 w = reinterpret_cast<const double2*>(wts)[q];
    const double v = vals[q >> 1];
    add_pair<Window>(out, i.x, float(w.x * v), i.y, float(w.y * v));
  }
}

int blocks_for(idx_t n) { return int(std::min<idx_t>((n + kBlock - 1) / kBlock, 1 << 16)); }

int main(int argc, char** argv) {
  const idx_t P = argc > 1 ? std::atoll(argv[1]) : (idx_t(1) << 23);
  const idx_t G = idx_t(M) * M, nnz = 4;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, P = %lld, grid %d^2\n", prop.name, P, M);
  idx_t* idx;
  double* wts;
  float *vals, *out;
  CK(cudaMalloc(&idx, P * nnz * sizeof(idx_t)));
  CK(cudaMalloc(&wts, P * nnz * sizeof(double)));
  CK(cudaMalloc(&vals, P * sizeof(float)));
  CK(cudaMalloc(&out, G * sizeof(float)));
  make_data<<<blocks_for(P), kBlock>>>(P, 42, idx, wts, vals);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  // the float64 host reference
  std::vector<idx_t> hi(P * nnz);
  std::vector<double> hw(P * nnz), ref(G, 0.0);
  std::vector<float> hv(P), got(G);
  CK(cudaMemcpy(hi.data(), idx, hi.size() * sizeof(idx_t), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hw.data(), wts, hw.size() * sizeof(double), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hv.data(), vals, hv.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (idx_t e = 0; e < P * nnz; ++e) ref[hi[e]] += hw[e] * double(hv[e / nnz]);
  double rn = 0;
  for (double x : ref) rn += x * x;
  // the copy ceiling: 1 GiB device to device
  const size_t cb = size_t(1) << 30;
  void *src, *dst;
  CK(cudaMalloc(&src, cb));
  CK(cudaMalloc(&dst, cb));
  CK(cudaMemset(src, 1, cb));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto time_ms = [&](auto&& f) {
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return double(ms);
  };
  const char* names[] = {"flat", "point", "pair2", "pair4"};
  auto run = [&](int v) {
    CK(cudaMemsetAsync(out, 0, G * sizeof(float)));
    if (v == 0) flat<<<blocks_for(P * nnz), kBlock>>>(idx, wts, nnz, P, vals, out);
    if (v == 1) point<<<blocks_for(P), kBlock>>>(idx, wts, P, vals, out);
    if (v == 2) pair<2><<<blocks_for(2 * P), kBlock>>>(idx, wts, P, vals, out);
    if (v == 3) pair<4><<<blocks_for(2 * P), kBlock>>>(idx, wts, P, vals, out);
  };
  std::vector<double> t[5];
  for (int rep = 0; rep < 25; ++rep) {
    const double c = time_ms([&] { CK(cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice)); });
    if (rep >= 3) t[4].push_back(c);
    for (int v = 0; v < 4; ++v) {
      // poison, then the variant (zeroing included, as kronpe's transpose zeroes its output)
      CK(cudaMemset(out, 0xff, G * sizeof(float)));
      const double ms = time_ms([&] { run(v); });
      if (rep >= 3) t[v].push_back(ms);
      if (rep == 0 || rep == 24) {
        CK(cudaMemcpy(got.data(), out, G * sizeof(float), cudaMemcpyDeviceToHost));
        double dn = 0;
        for (idx_t g = 0; g < G; ++g) dn += (double(got[g]) - ref[g]) * (double(got[g]) - ref[g]);
        const double rel = std::sqrt(dn / rn);
        if (!(rel < 1e-5)) {
          std::printf("%s: relative error %.3e against the float64 reference: WRONG\n", names[v], rel);
          return 1;
        }
        if (rep == 24) std::printf("%-6s relative error %.2e\n", names[v], rel);
      }
    }
  }
  auto med = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  const double copy_bw = 2.0 * cb / (med(t[4]) * 1e-3) / 1e9;
  const double moved = double(P) * nnz * 16 + double(P) * 4 + double(P) * 16;  // bench_cuda.py's count
  std::printf("copy 1 GiB: %.3f ms = %.0f GB/s\n", med(t[4]), copy_bw);
  for (int v = 0; v < 4; ++v) {
    const double ms = med(t[v]);
    std::printf("%-6s %.4f ms  %.0f GB/s  %.1f%% of copy  (x%.3f of flat)\n", names[v], ms, moved / (ms * 1e-3) / 1e9,
                100 * moved / (ms * 1e-3) / 1e9 / copy_bw, ms / med(t[0]));
  }
  return 0;
}
