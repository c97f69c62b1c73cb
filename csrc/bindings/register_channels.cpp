// Bindings of the channel mix (kronpe/channels.h): outputs as clipped linear combinations of
// input planes, one pass over the nodes.
#include <optional>
#include <string>
#include <vector>

#include "grid_args.h"
#include "kronpe/channels.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::flat_planes;
using bindings::p;
using bindings::plane_pointers;

void register_channels(py::module_& m) {
  m.def(
      "mix_channels",
      [](const std::vector<Array>& inputs, const Array& v, const std::vector<Array>& outputs,
         const std::optional<Array>& lo, const std::optional<Array>& hi) {
        require(!inputs.empty() && !outputs.empty(), "mix_channels: no inputs or no outputs");
        const index_t n = flat_planes(inputs, "inputs");
        const int cin = int(inputs.size()), cout = int(outputs.size());
        require(v.ndim() == 2 && v.shape[0] == cin && v.shape[1] == cout && (cout <= 1 || v.strides[1] == 1) &&
                    (cin <= 1 || v.strides[0] == cout),
                "mix_channels: v must be C-contiguous (inputs, outputs)");
        // outputs: n values each, one element stride (planes, or the columns of an interleaved array)
        index_t stride = 1;
        for (std::size_t c = 0; c < outputs.size(); ++c) {
          const Array& o = outputs[c];
          bindings::require_host(o, "outputs");
          require(o.dtype == inputs[0].dtype, "mix_channels: outputs must have the inputs' dtype");
          require(o.ndim() == 1 && o.shape[0] == n, "mix_channels: every output must be 1-D of the inputs' size");
          if (c == 0) stride = n > 1 ? o.strides[0] : 1;
          require(n <= 1 || o.strides[0] == stride, "mix_channels: the outputs must have one element stride");
        }
        require(stride >= 1, "mix_channels: the outputs' stride must be positive");
        require(lo.has_value() == hi.has_value(), "mix_channels: lo and hi go together");
        for (const std::optional<Array>* r : {&lo, &hi})
          if (*r) require((*r)->ndim() == 1 && (*r)->shape[0] == cout && ((*r)->strides[0] == 1 || cout <= 1),
                          "mix_channels: lo and hi must hold one contiguous value per output");
        index_t outside = 0;
        bindings::dispatch1(inputs[0].dtype, [&](auto t) {
          using T = decltype(t);
          const std::vector<const T*> ip = plane_pointers<const T>(inputs, "inputs");
          std::vector<T*> op;
          for (const Array& o : outputs) op.push_back(p<T>(o, "outputs"));
          for (T* o : op)  // the outputs span [o, o + (n - 1) stride]
            for (const T* i : ip)
              require(n == 0 || o + (n - 1) * stride < i || i + n <= o, "mix_channels: outputs must not overlap inputs");
          const T* vp = p<const T>(v, "v");
          const T* lp = lo ? p<const T>(*lo, "lo") : nullptr;
          const T* hp = hi ? p<const T>(*hi, "hi") : nullptr;
          py::gil_scoped_release release;
          outside = mix_channels<T>(n, cin, ip.data(), cout, vp, op.data(), stride, lp, hp);
        });
        return outside;
      },
      py::arg("inputs"), py::arg("v"), py::arg("outputs"), py::arg("lo") = py::none(), py::arg("hi") = py::none(),
      "outputs[c] = sum_k v[k, c] inputs[k] (each optionally clipped to [lo[c], hi[c]]); returns how many "
      "values were outside (internal).");
}
