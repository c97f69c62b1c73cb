#!/usr/bin/env bash
# One run on a GPU machine: the CUDA tests, the GPU benchmarks, the CPU suite and
# compute-sanitizer, each step under its own time limit, the logs under $OUT.
#
#   tools/gpu_check.sh [steps]   # steps: any of env,field,gpu,bench,kbench,cpubench,tprofile,inplace,suite,threads,sanitize
#                                # (default: env,gpu,bench,suite,threads,sanitize)
#
# field: bench_cuda.py's field section alone (the spline fit of CUDA tensors against the host's);
# bench: every section, or those in GPU_BENCH_ONLY; cpubench: `kronpe bench` on the host's cores
# (suites GPU_CPU_SUITES, default chains,fits,torch,scattered, at one thread and the default), its
# tables in the archive; tprofile: the torch Adam steps' ops by self time (torch.profiler) on one
# thread and on every core; inplace: benches/bench_in_place.py (the packed GEMM's in-place limit on
# this host's CPU). CUDAARCHS (default 90) names the architectures the module is built for.
#
# The module: kronpe's, imported from python/ when it was built with CUDA, else built here first
# (cmake, KRONPE_CUDA=ON, into python/kronpe). Time limits (seconds) come from GPU_T_<STEP>
# (defaults below; racecheck GPU_T_RACE); the last lines printed are a one-line summary per step;
# the logs come back as $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kronpe-gpu}
mkdir -p "$OUT"
steps=${1:-env,gpu,bench,suite,threads,sanitize}
t0=$(date +%s)
summary=()
note() { summary+=("$1"); echo "== $1"; }
run_step() {  # name limit command...
  local name=$1 limit=$2
  shift 2
  local s=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  note "$name rc=$rc $(( $(date +%s) - s ))s (limit ${limit}s): $(grep -E '(passed|failed|error|skipped)' "$OUT/$name.log" | tail -1)"
}
has() { [[ ",$steps," == *",$1,"* ]]; }

export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
py=$(command -v python3)
if ! $py -c "import kronpe, sys; sys.exit(0 if kronpe.cuda.is_available() else 1)" >"$OUT/import.log" 2>&1; then
  s=$(date +%s)
  CUDAARCHS=${CUDAARCHS:-90} cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKRONPE_CUDA=ON \
    -Dpybind11_DIR="$($py -m pybind11 --cmakedir)" >"$OUT/build.log" 2>&1 &&
    cmake --build build/gpu -j"$(nproc)" >>"$OUT/build.log" 2>&1
  note "built: rc=$? $(( $(date +%s) - s ))s"
fi
if has env; then
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    uname -r
    lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\))"
    echo "SMT siblings: $(cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort -u | tr '\n' ' ')"
    $py -c "import sys, numpy, torch; print(sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())"
    $py -c "import cupy; print('cupy', cupy.__version__)"
    $py -c "import kronpe, json; print(json.dumps(kronpe.build_info(), default=str)); print(kronpe.cuda.info(load_cublas=True))"
  } >"$OUT/env.log" 2>&1
  note "env: $(head -1 "$OUT/env.log" | tail -1); $(sed -n 2p "$OUT/env.log")"
fi
# the GPU tests: every "cuda-cupy"/"cuda-torch" case of the suite and the GPU-only files
has gpu && run_step gpu "${GPU_T_GPU:-150}" $py -m pytest -q -p no:cacheprovider -n 8 --tb=short -rfE \
  -m "gpu and not slow" tests/
has field && run_step field "${GPU_T_FIELD:-90}" $py benches/bench_cuda.py --only field --json "$OUT/field.json"
has bench && run_step bench "${GPU_T_BENCH:-150}" $py benches/bench_cuda.py ${GPU_BENCH_ONLY:+--only "$GPU_BENCH_ONLY"} \
  --json "$OUT/bench.json"
# kronpe bench's own CUDA suite (mode-n chains on the GPU with torch's peers): its table and JSON
has kbench && run_step kbench "${GPU_T_KBENCH:-120}" $py -m kronpe bench --suite cuda --no-progress --no-plots \
  --out "$OUT/kbench"
has cpubench && run_step cpubench "${GPU_T_CPUBENCH:-240}" $py -m kronpe bench --suite "${GPU_CPU_SUITES:-chains,fits,torch,scattered}" \
  --threads 1,default --seeds 1 --no-progress --no-plots --out "$OUT/cpubench"
has tprofile && run_step tprofile "${GPU_T_TPROFILE:-120}" bash -c \
  "OMP_NUM_THREADS=1 $py benches/bench_torch.py 20 --profile && $py benches/bench_torch.py 20 --profile"
has inplace && run_step inplace "${GPU_T_INPLACE:-150}" $py benches/bench_in_place.py 10
# the CPU suite: 8 workers of 2 OpenMP threads (16 workers of 16 threads oversubscribe the cores),
# then the threaded kernels' files alone with every core
has suite && OMP_NUM_THREADS=2 run_step suite "${GPU_T_SUITE:-120}" $py -m pytest -q -p no:cacheprovider -n 8 \
  --tb=short -rfE -m "not gpu" tests/
has threads && run_step threads "${GPU_T_THREADS:-120}" $py -X faulthandler -m pytest -q -p no:cacheprovider \
  --tb=short -rfE -m "not gpu" tests/test_threads.py tests/test_mode_product.py tests/test_multigrid.py \
  tests/test_blas.py tests/test_fit_points.py
if has sanitize; then
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1 KRONPE_TEST_NO_POOL=1
  for tool in memcheck racecheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check no)
    limit=${GPU_T_SAN:-60}
    [ "$tool" = racecheck ] && limit=${GPU_T_RACE:-120}  # (74 s on an H200 for these tests)
    run_step "san_$tool" "$limit" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 \
      --target-processes all $py -m pytest -q -p no:cacheprovider -x -m "gpu and not slow" -k "cupy" \
      tests/test_cuda.py tests/test_blending.py tests/test_mode_product.py
    grep -E "ERROR SUMMARY|Device not supported" "$OUT/san_$tool.log" | tail -2
    # the fills' multigrid (racecheck on one PCG case: its reductions' and coarsest solve's shared
    # memory; the whole file under racecheck takes minutes)
    mg_k="cupy"
    [ "$tool" = racecheck ] && mg_k="cupy and pcg and 33x47 and 0.0"
    run_step "san_${tool}_multigrid" "$limit" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 \
      --target-processes all $py -m pytest -q -p no:cacheprovider -x -m "gpu and not slow" -k "$mg_k" \
      tests/test_multigrid.py
  done
  unset PYTORCH_NO_CUDA_MEMORY_CACHING KRONPE_TEST_NO_POOL
fi
echo
grep -E "^  (kronpe|cuBLAS|torch|papers|official|device|blend|cupy|fit_spline)" "$OUT/field.log" "$OUT/bench.log" 2>/dev/null | cut -c1-160
# the logs as one archive (bench.json beside it)
printf '%s\n' "${summary[@]}" >"$OUT/summary.log"
(cd "$OUT" && tar czf logs.tgz ./*.log $(ls -d kbench cpubench 2>/dev/null) && rm -rf ./*.log kbench cpubench)
echo
echo "gpu_check: $(( $(date +%s) - t0 ))s (logs in \$OUT/logs.tgz)"
printf '%s\n' "${summary[@]}"
