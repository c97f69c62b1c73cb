// Linked when kronpe is built without CUDA: the queries answer "no", every kernel entry point
// throws BackendError (RuntimeError in Python) saying so.
#include "kronpe/cuda.h"

namespace kronpe::cuda {
namespace {
[[noreturn]] void unavailable() {
  throw BackendError(
      "kronpe was built without CUDA: reinstall it on a machine with the CUDA toolkit (nvcc) and "
      "cuBLAS headers (pip install nvidia-cublas), e.g. KRONPE_CUDA=ON pip install kronpe");
}
}  // namespace

bool built() { return false; }
int device_count() { return 0; }
Info info(bool) { return Info{}; }
void set_cublas_search_paths(const std::vector<std::string>&) {}
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
const ModeCostModel& cuda_cost_model() { unavailable(); }

template <typename T>
void embed_basis(const Context&, const BasisParams&, index_t, const T*, index_t, T*, index_t,
                 index_t) {
  unavailable();
}
std::size_t embed_fourier_workspace(const FourierParams&) { unavailable(); }
template <typename T>
void embed_fourier(const Context&, const FourierParams&, index_t, const T*, index_t, T*, index_t,
                   index_t) {
  unavailable();
}

std::size_t multi_mode_workspace(int, const index_t*, const index_t*, int, const int*,
                                 const index_t*, const index_t*, int, bool) {
  unavailable();
}
template <typename T>
void multi_mode_product(const Context&, int, const index_t*, const T*, const index_t*, int,
                        const int*, const MatrixRef<T>*, T*, int*) {
  unavailable();
}
template <typename T>
void strided_copy(const Context&, int, const index_t*, const T*, const index_t*, T*,
                  const index_t*) {
  unavailable();
}

std::size_t blend_fly_workspace(const blend::WeightFunction&) { unavailable(); }
std::size_t blend_plan_workspace(index_t, index_t, index_t) { unavailable(); }
template <typename Q>
void blend_weights(const Context&, const blend::WeightFunction&, blend::MatrixView<const Q>,
                   blend::MatrixView<index_t>, blend::MatrixView<double>) {
  unavailable();
}
template <typename T, typename Q>
void blend_fly(const Context&, const blend::WeightFunction&, blend::MatrixView<const Q>,
               blend::MatrixView<const T>, blend::MatrixView<T>) {
  unavailable();
}
template <typename T, typename Q>
void blend_transpose_fly(const Context&, const blend::WeightFunction&, blend::MatrixView<const Q>,
                         blend::MatrixView<const T>, blend::MatrixView<T>, const index_t*,
                         const index_t*) {
  unavailable();
}
template <typename T>
void blend_stored(const Context&, blend::MatrixView<const index_t>,
                  blend::MatrixView<const double>, blend::MatrixView<const T>,
                  blend::MatrixView<T>) {
  unavailable();
}
template <typename T>
void blend_transpose_stored(const Context&, blend::MatrixView<const index_t>,
                            blend::MatrixView<const double>, blend::MatrixView<const T>,
                            blend::MatrixView<T>, const index_t*, const index_t*) {
  unavailable();
}
template <typename Q>
void blend_plan_fly(const Context&, const blend::WeightFunction&, blend::MatrixView<const Q>,
                    index_t*, index_t*) {
  unavailable();
}
void blend_plan_stored(const Context&, blend::MatrixView<const index_t>, index_t, index_t*,
                       index_t*) {
  unavailable();
}

#define KRONPE_STUB_T(T)                                                                       \
  template void embed_basis<T>(const Context&, const BasisParams&, index_t, const T*, index_t, \
                               T*, index_t, index_t);                                          \
  template void embed_fourier<T>(const Context&, const FourierParams&, index_t, const T*,      \
                                 index_t, T*, index_t, index_t);                               \
  template void multi_mode_product<T>(const Context&, int, const index_t*, const T*,           \
                                      const index_t*, int, const int*, const MatrixRef<T>*,    \
                                      T*, int*);                                               \
  template void strided_copy<T>(const Context&, int, const index_t*, const T*, const index_t*, \
                                T*, const index_t*);                                           \
  template void blend_weights<T>(const Context&, const blend::WeightFunction&,                 \
                                 blend::MatrixView<const T>, blend::MatrixView<index_t>,       \
                                 blend::MatrixView<double>);                                   \
  template void blend_plan_fly<T>(const Context&, const blend::WeightFunction&,                \
                                  blend::MatrixView<const T>, index_t*, index_t*);             \
  template void blend_stored<T>(const Context&, blend::MatrixView<const index_t>,              \
                                blend::MatrixView<const double>, blend::MatrixView<const T>,   \
                                blend::MatrixView<T>);                                         \
  template void blend_transpose_stored<T>(const Context&, blend::MatrixView<const index_t>,    \
                                          blend::MatrixView<const double>,                     \
                                          blend::MatrixView<const T>, blend::MatrixView<T>,    \
                                          const index_t*, const index_t*);
#define KRONPE_STUB_TQ(T, Q)                                                                   \
  template void blend_fly<T, Q>(const Context&, const blend::WeightFunction&,                  \
                                blend::MatrixView<const Q>, blend::MatrixView<const T>,        \
                                blend::MatrixView<T>);                                         \
  template void blend_transpose_fly<T, Q>(const Context&, const blend::WeightFunction&,        \
                                          blend::MatrixView<const Q>,                          \
                                          blend::MatrixView<const T>, blend::MatrixView<T>,    \
                                          const index_t*, const index_t*);
KRONPE_STUB_T(float)
KRONPE_STUB_T(double)
KRONPE_STUB_TQ(float, float)
KRONPE_STUB_TQ(float, double)
KRONPE_STUB_TQ(double, float)
KRONPE_STUB_TQ(double, double)

struct DeviceThinPlate::Impl {};
DeviceThinPlate::DeviceThinPlate(int, const smooth::Grid&, const float*, const smooth::MultigridOptions&) {
  unavailable();
}
DeviceThinPlate::~DeviceThinPlate() = default;
void DeviceThinPlate::set_lambda(double) { unavailable(); }
void DeviceThinPlate::set_reflect(bool) { unavailable(); }
void DeviceThinPlate::set_data_term(const float*) { unavailable(); }
int DeviceThinPlate::levels() const { unavailable(); }
void DeviceThinPlate::apply(const float*, float*, double) { unavailable(); }
void DeviceThinPlate::vcycle(const float*, float*) { unavailable(); }
void DeviceThinPlate::fmg(const float*, float*, int) { unavailable(); }
void DeviceThinPlate::cycles(const float*, float*, bool, int, double) { unavailable(); }
smooth::PcgResult DeviceThinPlate::pcg(const float*, float*, bool, double, index_t, double, double) { unavailable(); }
std::size_t multigrid_cache_bytes(bool) noexcept { return 0; }
FillOutcome smooth_fill(int, const smooth::Grid&, const float*, int, const float* const*, const float*, index_t,
                        const index_t*, const FillSettings&, float* const*) {
  unavailable();
}

}  // namespace kronpe::cuda
