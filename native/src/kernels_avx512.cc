// The elementwise kernels for the avx512 instruction set (compile flags in native/CMakeLists.txt).
#define NDVM_SIMD_NAME avx512
#include "kernels_simd.inc"
