// kronpe C++ core: the widest vector paths the kernels may take. The CPU decides (AVX-512 F/DQ/BW/VL,
// AVX2, or neither), and the environment variable KRONPE_SIMD=avx512|avx2|generic, read once when
// the library loads, can only lower it: every path runs, and is tested, on one AVX-512 machine.
// (Functions compiled as target clones, KRONPE_CLONES, are picked by the loader from the CPU alone.)
#pragma once

namespace kronpe {
// 2: AVX-512 allowed, 1: AVX2 at most, 0: generic code only.
int simd_cap();
// The level in force: the CPU's, capped by simd_cap().
int simd_level();
}  // namespace kronpe
