// Shared by every per-element formula header: compiled for the host by the C++ compiler
// and for both host and device by nvcc.
#pragma once

// Used as `TIRL_HD inline`: the `inline` is written at each function, so this adds none.
#if defined(__CUDACC__)
#define TIRL_HD __host__ __device__
#else
#define TIRL_HD
#endif
