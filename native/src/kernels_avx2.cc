// The elementwise kernels for the avx2 instruction set (compile flags in native/CMakeLists.txt).
#define NDVM_SIMD_NAME avx2
#include "kernels_simd.inc"
#include "linalg_simd.inc"  // the small matrix products (linalg.h)
