// kronpe C++ core: how many threads kronpe's own CPU kernels (blending, embedders) use when a call
// does not say (kronpe.set_num_threads / get_num_threads). The kernels run on the process's
// OpenMP runtime, which torch shares when it is loaded (one libgomp.so.1 per process), so they
// add no thread pool of their own.
#pragma once

namespace kronpe {

// n >= 1 threads, or 0 for OpenMP's default (omp_get_max_threads()); callers check the range.
void set_default_threads(int n);
// The count in force: the one set, else OpenMP's default; 1 without OpenMP.
int default_threads();

}  // namespace kronpe
