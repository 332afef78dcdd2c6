#ifndef SHARDD_BENCH_COLLECTIVES_WORKER_H_
#define SHARDD_BENCH_COLLECTIVES_WORKER_H_

#include "bench/collectives_options.h"

namespace shardd::bench::collectives {

// One rank of bench/collectives (--worker): connects ours (a GlooCollective)
// and the raw Gloo contexts, runs every point's blocks of repetitions in
// interleaved rounds (the file comment of collectives.cc says how), and on
// rank 0 prints one ROW line per point (and FSDP lines with --fsdp) for the
// parent. Dies (exit 1) on any failure. Returns when every rank is done.
void RunWorker(const Options& options);

}  // namespace shardd::bench::collectives

#endif  // SHARDD_BENCH_COLLECTIVES_WORKER_H_
