// Linked when kronpe is built without CUDA: every CUDA entry point says so.
#include "kronpe/cuda.h"

namespace kronpe::cuda {
bool built() { return false; }
int device_count() { return 0; }
}  // namespace kronpe::cuda
