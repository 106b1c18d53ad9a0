// The elementwise kernels for the baseline instruction set (compile flags in native/CMakeLists.txt).
#define NDVM_SIMD_NAME baseline
#include "kernels_simd.inc"
#include "linalg_simd.inc"  // the small matrix products (linalg.h)
