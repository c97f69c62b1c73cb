#!/usr/bin/env bash
# One run on a lent GPU machine (the workplace's device tool): the CUDA tests, the GPU benchmark,
# the whole suite and compute-sanitizer, each step under its own time limit, logs under $OUT.
#
#   tools/gpu_check.sh [steps]   # steps: any of env,gpu,bench,kbench,profile,suite,threads,crash,
#                                # scaling,diag,ncu,sanitize (default: env,gpu,bench,suite,threads,sanitize)
#
# The module: a CUDA build for that machine's Python carried in .gpu/pkg/kronpe (tools/gpu_prebuild.sh,
# used when its SOURCE_HASH matches csrc/ and CMakeLists.txt), else built there with cmake.
# Time limits (seconds) come from GPU_T_<STEP> (defaults below; racecheck GPU_T_RACE); the last lines
# printed are a one-line summary per step; the logs come back as $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/.."
# the hash of the compiled sources: a carried build is used only when it was made from these
src_hash() { cat CMakeLists.txt $(find csrc -type f | LC_ALL=C sort) | sha1sum | cut -c1-16; }
if [ "${1:-}" = "--hash" ]; then src_hash; exit 0; fi
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
so=$(ls .gpu/pkg/kronpe/_core.cpython-*.so 2>/dev/null | head -1)
if [ -n "$so" ] && [ "$(cat .gpu/pkg/kronpe/SOURCE_HASH 2>/dev/null)" = "$(src_hash)" ]; then
  cp "$so" python/kronpe/
elif [ -n "$so" ]; then
  note "the carried build in .gpu/ is of other sources: building here"
fi
if ! $py -c "import kronpe, sys; sys.exit(0 if kronpe.cuda.is_available() else 1)" >"$OUT/import.log" 2>&1; then
  s=$(date +%s)
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKRONPE_CUDA=ON \
    -Dpybind11_DIR="$($py -m pybind11 --cmakedir)" >"$OUT/build.log" 2>&1 &&
    cmake --build build/gpu -j16 >>"$OUT/build.log" 2>&1
  note "built there: rc=$? $(( $(date +%s) - s ))s"
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
has bench && run_step bench "${GPU_T_BENCH:-150}" $py benches/bench_cuda.py --json "$OUT/bench.json"
# kronpe bench's own CUDA suite (mode-n chains on the GPU with torch's peers): its table and JSON
has kbench && run_step kbench "${GPU_T_KBENCH:-120}" $py -m kronpe bench --suite cuda --no-progress --no-plots \
  --out "$OUT/kbench"
has profile && run_step profile "${GPU_T_PROFILE:-120}" $py benches/bench_cuda.py --profile \
  ${GPU_PROFILE_MATCH:+--profile-match "$GPU_PROFILE_MATCH"}
# the CPU suite: 8 workers of 2 OpenMP threads (16 workers of 16 threads oversubscribe the cores),
# then the threaded kernels' files alone with every core
has suite && OMP_NUM_THREADS=2 run_step suite "${GPU_T_SUITE:-120}" $py -m pytest -q -p no:cacheprovider -n 8 \
  --tb=short -rfE -m "not gpu" tests/
has threads && run_step threads "${GPU_T_THREADS:-120}" $py -X faulthandler -m pytest -q -p no:cacheprovider \
  --tb=short -rfE -m "not gpu" tests/test_threads.py tests/test_mode_product.py tests/test_multigrid.py \
  tests/test_blas.py tests/test_fit_points.py
# the crash of test_torch_bad_input seen under xdist on the H200 machine: once more, in one process
# with faulthandler and every test's name printed (the last name before the stack is the culprit)
has crash && run_step crash "${GPU_T_CRASH:-120}" $py -X faulthandler -m pytest -v -s -p no:cacheprovider \
  -p no:xdist --tb=short -rfE tests/test_bad_inputs.py -k "torch_bad_input"
# the host solver's scaling on that machine's cores (fit_points took 2x longer there with 16
# threads than here with 2): one scattered fit at 1, 2, 4, 8 and 16 OpenMP threads
has scaling && run_step scaling "${GPU_T_SCALING:-90}" bash -c 'for t in 1 2 4 8 16; do OMP_NUM_THREADS=$t '"$py"' -c "
import sys, time, numpy as np
sys.path.insert(0, \"python\")
from kronpe.bench.scattered import task_inputs, kronpe_points
s = task_inputs(\"astronaut\", \"scattered\")
ts = []
for r in range(6):
    t0 = time.perf_counter(); kronpe_points(s); ts.append(time.perf_counter() - t0)
print($t, \"threads: fit_points 25% astronaut, median\", round(float(np.median(ts[1:])) * 1e3, 1), \"ms\")
"; done'
# the host-side diagnostics (tools/gpu_host_diag.py; sections from GPU_DIAG, default busy,spec,overhead,fit:
# the busy-core back-off per thread count, the lead solve beside the sweep, the CUDA calls' host cost,
# GridPlan.fit's host time profiled)
has diag && run_step diag "${GPU_T_DIAG:-90}" env DIAG_COUNTS="${DIAG_COUNTS:-4,8,16}" $py tools/gpu_host_diag.py \
  "${GPU_DIAG:-busy,spec,overhead,fit}"
# Nsight Compute on the stored blend kernels of dense rows (the third launch of each): the limiter of
# the 8M-point rows
ncu_blend() {
  for k in stored_group_kernel transpose_stored_flat_kernel; do
    ncu --clock-control none --target-processes all -k "regex:$k" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section ComputeWorkloadAnalysis --section WarpStateStats $py benches/bench_cuda.py --only blend --quick
  done
}
has ncu && run_step ncu "${GPU_T_NCU:-90}" bash -c "$(declare -f ncu_blend); py=$py; ncu_blend"
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
      tests/test_multigrid_cuda.py
  done
  unset PYTORCH_NO_CUDA_MEMORY_CACHING KRONPE_TEST_NO_POOL
fi
echo
grep -E "^  (kronpe|cuBLAS|torch|papers|official|device|blend|cupy)" "$OUT/bench.log" 2>/dev/null | cut -c1-140
[ -f "$OUT/diag.log" ] && grep -v -i "warn" "$OUT/diag.log" | tail -80 | cut -c1-160
# the device tool brings back a few files per call: the logs travel as one archive (bench.json beside it)
printf '%s\n' "${summary[@]}" >"$OUT/summary.log"
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo
echo "gpu_check: $(( $(date +%s) - t0 ))s (logs in \$OUT/logs.tgz)"
printf '%s\n' "${summary[@]}"
