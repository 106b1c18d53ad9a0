// The elementwise kernels for the avx512 instruction set (compile flags in native/CMakeLists.txt).
#define NDVM_SIMD_NAME avx512
#include "kernels_simd.inc"
#include "linalg_simd.inc"  // the small matrix products (linalg.h)
