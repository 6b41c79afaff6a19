// TENAX_CPU_CLONES: a function built once per instruction set (x86-64-v4, i.e. AVX-512 with
// BW/VL; AVX2; baseline x86-64), the best one picked when the library loads (GCC's target_clones,
// an ifunc). For the hand-written CPU loops (model/cpu_kernels.cc, train/adamw_kernel.cc), whose
// inlined helpers are then compiled for each set. Elsewhere (other compilers, architectures) it
// is empty and the loops build once, as the compiler can.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TENAX_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define TENAX_CPU_CLONES
#endif
