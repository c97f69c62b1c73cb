#include "common.h"

namespace py = pybind11;

void register_blend(py::module_& m) {}
