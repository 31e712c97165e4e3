// OpenBLAS's worker threads busy-wait (sched_yield in a loop) for about 2^28 cycles after
// every parallel GEMM before they sleep. Between requests that is all the time: they
// take the cores gRPC needs to receive the next request and cost the server several
// times its own CPU per request. The wait is read from OPENBLAS_THREAD_TIMEOUT once, when
// the library loads (before main), so gemm-server sets it and runs itself again.
#ifndef GEMMD_SERVER_BLAS_THREAD_WAIT_H_
#define GEMMD_SERVER_BLAS_THREAD_WAIT_H_

namespace gemmd {

// Unless OPENBLAS_THREAD_TIMEOUT is set already (a value the user chose is kept), sets it
// to 4 (2^4 cycles: the workers sleep at once) and execs this program again with the same
// arguments; returns only if it was set, or when the exec fails (the server then runs
// with OpenBLAS's default).
void LimitBlasThreadWait(char** argv);

}  // namespace gemmd

#endif  // GEMMD_SERVER_BLAS_THREAD_WAIT_H_
