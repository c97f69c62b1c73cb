// kronpe C++ core: the CUDA backend's host-side entry points (stubbed without CUDA).
#pragma once
#include "kronpe/common.h"

namespace kronpe::cuda {
bool built();        // true when the CUDA kernels were compiled into this module
int device_count();  // visible CUDA devices (0 without a driver or a device)
}  // namespace kronpe::cuda
