#include "common.h"

namespace py = pybind11;

void register_mode_product(py::module_& m) {}
