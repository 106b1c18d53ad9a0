// The tiled replay's SIMD loops for the baseline instruction set (compile flags in native/CMakeLists.txt).
#define NDVM_SIMD_NAME baseline
#include "tiled_simd.inc"
