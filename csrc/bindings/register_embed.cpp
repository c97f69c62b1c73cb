#include "common.h"

namespace py = pybind11;

void register_embed(py::module_& m) {}
