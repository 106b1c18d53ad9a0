// The tiled replay's SIMD loops for the avx512 instruction set (compile flags in native/CMakeLists.txt).
#define NDVM_SIMD_NAME avx512
#include "tiled_simd.inc"
