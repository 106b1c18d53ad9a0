// The tiled replay's SIMD loops for the avx2 instruction set (compile flags in native/CMakeLists.txt).
#define NDVM_SIMD_NAME avx2
#include "tiled_simd.inc"
