#!/usr/bin/env bash
# The GPU checks, run on a lent machine (one NVIDIA GPU, no network) from the repository
# root, with the folder .whl/ of tune/gpu_fetch.sh carried along:
#
#   bash tune/gpu_session.sh setup|check|bench|latency|tune|sanitize
#
# Every stage starts with `setup`, which is idempotent (a few seconds when a warm machine
# already has it): the carried wheels and PyCUDA (built from its source distribution, or
# the wheel prebuilt by gpu_fetch.sh when that fails) go into $GPU_SITE (on PYTHONPATH);
# sapporo is installed editable into the machine's Python (no network needed for either).
# Stages:
#   setup     only that, and the versions, the GPU, `sapporo info`
#   check     pytest: tests/backend/test_cuda.py + tests/kernels/test_cuda_compile.py, then
#             the whole suite (--maxfail=25), with SAPPORO_BACKEND=cuda
#             SAPPORO_TEST_BACKENDS=cuda,opencl
#   bench     sapporo bench at N = 131072: order 4 double-single and double (with the CuPy
#             and PyTorch peers), order 6 double-single; N_active sweep 1..1024 at the powers
#             of two and one past each (9, 33, 65, 129, 257, 513: padding cliffs)
#   latency   the small-call costs: block steps at N = 16k and 64k with 1, 16 and 256
#             active (Python API and C API, host time = wall - kernels), then N_active
#             1..64 at N = 131072 (order 4 double-single) with the parts combined by the
#             reduce kernel (the default) and on the host (GPU_HOST_REDUCE_MAX = 65536)
#   tune      sapporo tune for the variants in TUNE_VARIANTS; profiles into the files archive
#   sanitize  a small force computation under compute-sanitizer memcheck, racecheck,
#             synccheck and initcheck
#
# Output: stdout, and $OUT/<stage>.log; the stage's files (JUnit XML, bench tables and CSV,
# profiles) in $OUT/<stage>-files.tar.gz; a summary table last (also $OUT/<stage>-summary.txt).
# Steps stop at a deadline (STAGE_SECONDS after the start) so that the summary and the
# files are written before the tool's 10-minute limit.
#
# Environment (all optional):
#   OUT            output folder (default /tmp/gpu-out; the device tool sets it)
#   GPU_PYTHON     interpreter (default /opt/torch/.venv/bin/python3)
#   GPU_SITE       install folder of the carried packages (default /tmp/site)
#   GPU_WORK       work folder: PyCUDA build, stage files, profiles (default /tmp/gpu-work)
#   STAGE_SECONDS  deadline of the steps, in seconds from the start (default 540)
#   TUNE_VARIANTS  "ORDER:PRECISION ..." (default "4:double-single 6:double-single 4:double")
#   TUNE_ARGS      extra options of `sapporo tune`, e.g. "--quick"
#   PYCUDA_FROM    sdist (default: build it; the prebuilt wheel if that fails) or prebuilt
#   GPU_LIBCUDA_DIR  folder with the libcuda.so to link PyCUDA against (default: found)
#   BENCH_LAUNCH   auto (default: profiles of a `tune` stage on this machine, else the
#                  built-in table) or defaults
set -uo pipefail
export PYTHONUNBUFFERED=1

STAGE=${1:-}
case $STAGE in
    setup | check | bench | latency | tune | sanitize) ;;
    *)
        echo "usage: bash tune/gpu_session.sh setup|check|bench|latency|tune|sanitize" >&2
        exit 2
        ;;
esac

cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
OUT=${OUT:-/tmp/gpu-out}
PY=${GPU_PYTHON:-/opt/torch/.venv/bin/python3}
SITE=${GPU_SITE:-/tmp/site}
WORK=${GPU_WORK:-/tmp/gpu-work}
ST=$WORK/$STAGE # this stage's files
DEADLINE=$((SECONDS + ${STAGE_SECONDS:-540}))
SAPPORO=("$PY" -c 'import sys; from sapporo.cli import main; sys.exit(main())')
export ROOT PY SITE WORK
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

ROWS=() # summary rows: status|seconds|name
FAILED=0

# step [--info] NAME COMMAND...: run COMMAND with the time left as its limit; record it.
# --info: informational, a failure does not fail the stage.
step() {
    local info=0
    if [ "$1" = --info ]; then
        info=1
        shift
    fi
    local name=$1
    shift
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 15 ]; then
        echo "=== $name: skipped, stage deadline reached"
        ROWS+=("SKIPPED|0|$name")
        [ "$info" -eq 1 ] || FAILED=1
        return 1
    fi
    echo
    echo "=== [$(date -u +%H:%M:%S)] $name (limit ${left} s)"
    echo "+ $*"
    local t0=$SECONDS rc status
    timeout -k 15 "$left" "$@"
    rc=$?
    case $rc in
        0) status=ok ;;
        124 | 137) status=TIMEOUT ;;
        *) status="FAIL($rc)" ;;
    esac
    [ "$rc" -eq 0 ] || [ "$info" -eq 1 ] || FAILED=1
    [ "$info" -eq 0 ] || [ "$rc" -eq 0 ] || status="$status,info"
    ROWS+=("$status|$((SECONDS - t0))|$name")
    echo "=== $name: $status in $((SECONDS - t0)) s"
    return "$rc"
}

die() {
    echo "ERROR: $*"
    ROWS+=("FAIL|0|$*")
    FAILED=1
}

# ---------------------------------------------------------------------------------------
# setup

find_cuda_root() {
    local d n
    for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" "${CUDA_ROOT:-}" /usr/local/cuda; do
        if [ -n "$d" ] && [ -f "$d/include/cuda.h" ]; then
            echo "$d"
            return 0
        fi
    done
    if n=$(command -v nvcc); then
        d=$(dirname "$(dirname "$(readlink -f "$n")")")
        if [ -f "$d/include/cuda.h" ]; then
            echo "$d"
            return 0
        fi
    fi
    n=
    for d in /usr/local/cuda-*; do
        [ -f "$d/include/cuda.h" ] && n=$d # the last, i.e. the newest
    done
    [ -n "$n" ] && echo "$n"
}

# A folder holding libcuda.so to link PyCUDA against (the driver library is loaded at run
# time by its soname, libcuda.so.1): the toolkit's stubs, the driver's own, or a link to
# the driver's libcuda.so.1; failing all that a stub with every function cuda.h declares
# (PyCUDA then imports only where a driver is installed).
# shellcheck disable=SC2329  # run through `bash -c` (export -f)
find_libcuda_dir() {
    local d lib
    if [ -n "${GPU_LIBCUDA_DIR:-}" ]; then
        echo "$GPU_LIBCUDA_DIR"
        return 0
    fi
    for d in "$CUDA_ROOT/lib64/stubs" "$CUDA_ROOT/lib/stubs" \
        "$CUDA_ROOT/targets/x86_64-linux/lib/stubs" "$CUDA_ROOT/lib64" \
        /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
        if [ -e "$d/libcuda.so" ]; then
            echo "$d"
            return 0
        fi
    done
    mkdir -p "$WORK/libcuda"
    lib=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64/ {print $NF; exit}')
    for d in "$lib" /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 \
        /usr/local/nvidia/lib64/libcuda.so.1; do
        if [ -n "$d" ] && [ -e "$d" ]; then
            ln -sf "$d" "$WORK/libcuda/libcuda.so"
            echo "$WORK/libcuda"
            return 0
        fi
    done
    echo "WARNING: no libcuda found; linking PyCUDA against a stub made from cuda.h" >&2
    "$CXX" -E -P -x c++ "$CUDA_ROOT/include/cuda.h" |
        grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d ' (' | sort -u |
        sed 's/.*/extern "C" int &(void) { return 999; }/' >"$WORK/libcuda/stub.cpp" &&
        "$CXX" -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$WORK/libcuda/libcuda.so" \
            "$WORK/libcuda/stub.cpp" || return 1
    echo "$WORK/libcuda"
}

# PyCUDA from the carried source distribution, into $SITE (no index, no build isolation,
# no dependencies; CURAND off: sapporo does not use it and the toolkit may lack it).
# shellcheck disable=SC2329  # run through `bash -c` (export -f)
build_pycuda() {
    set -e
    local sdist src libdir
    sdist=$(ls "$ROOT"/.whl/pycuda-*.tar.gz)
    rm -rf "$WORK/pycuda-src"
    mkdir -p "$WORK/pycuda-src"
    tar -xzf "$sdist" -C "$WORK/pycuda-src"
    src=$(echo "$WORK"/pycuda-src/pycuda-*)
    libdir=$(find_libcuda_dir)
    echo "CUDA_ROOT=$CUDA_ROOT, libcuda for linking: $(ls -l "$libdir/libcuda.so")"
    cd "$src"
    "$PY" configure.py --cuda-root="$CUDA_ROOT" --cudadrv-lib-dir="$libdir" \
        --no-cuda-enable-curand
    cat siteconf.py
    printf '\n[build_ext]\nparallel = %s\n' "$(nproc)" >>setup.cfg
    "$PY" -m pip install --no-index --no-deps --no-build-isolation --no-cache-dir \
        --no-compile --upgrade --target "$SITE" .
}

# PyCUDA: built from the sdist; the wheel prebuilt by tune/gpu_fetch.sh (.whl/prebuilt/)
# when that fails, or first with PYCUDA_FROM=prebuilt (then the build if it does not import).
install_pycuda() {
    local wheel
    wheel=$(find "$ROOT/.whl/prebuilt" -name 'pycuda-*.whl' 2>/dev/null | head -1)
    export -f build_pycuda find_libcuda_dir
    if [ "${PYCUDA_FROM:-sdist}" = prebuilt ] && [ -n "$wheel" ]; then
        step --info "setup: PyCUDA from the prebuilt wheel" "$PY" -m pip install -q \
            --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            "$wheel" && "$PY" -c 'import pycuda.driver' && return 0
        echo "the prebuilt PyCUDA does not import here; building it from the sdist"
    fi
    if [ -z "$wheel" ]; then
        step "setup: build PyCUDA from the sdist" bash -c build_pycuda
        return
    fi
    step --info "setup: build PyCUDA from the sdist" bash -c build_pycuda && return 0
    echo "building PyCUDA failed; installing the prebuilt wheel $(basename "$wheel")"
    step "setup: PyCUDA from the prebuilt wheel (fallback)" "$PY" -m pip install -q \
        --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$wheel"
}

# shellcheck disable=SC2329  # run through `bash -c` (export -f)
install_sapporo() {
    if "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
        -e "$ROOT"; then
        return 0
    fi
    echo "editable install failed; installing a copy into $SITE instead"
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
        --no-compile --upgrade --target "$SITE" "$ROOT"
}

# shellcheck disable=SC2329  # run through `bash -c` (export -f)
versions() {
    "$PY" - <<'EOF'
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
for name in ("numpy", "pycuda", "pyopencl", "cffi", "pytools", "platformdirs", "mako",
             "pytest", "cupy", "torch", "sapporo"):
    try:
        mod = importlib.import_module(name)
        print(f"{name:13s} {getattr(mod, '__version__', getattr(mod, 'VERSION_TEXT', '?'))}"
              f"  {getattr(mod, '__file__', '')}")
    except Exception as exc:
        print(f"{name:13s} not importable: {type(exc).__name__}: {exc}")
try:
    import pycuda.driver as drv
    drv.init()
    dev = drv.Device(0)
    print("CUDA driver API", drv.get_driver_version(), "PyCUDA built for", drv.get_version(),
          "| device 0:", dev.name(), "sm_%d%d" % dev.compute_capability(),
          dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT), "SMs")
except Exception as exc:
    print("pycuda.driver:", type(exc).__name__, exc)
EOF
}

setup() {
    echo "== setup: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), $(nproc) CPUs, repo $ROOT"
    if [ ! -x "$PY" ]; then
        die "no Python at $PY (set GPU_PYTHON)"
        return 1
    fi
    if ! ls "$ROOT"/.whl/*.whl "$ROOT"/.whl/pycuda-*.tar.gz >/dev/null 2>&1; then
        die "no wheels or PyCUDA sdist in .whl/: run tune/gpu_fetch.sh, carry ['.whl']"
        return 1
    fi
    CUDA_ROOT=$(find_cuda_root) || CUDA_ROOT=
    if [ -z "$CUDA_ROOT" ]; then
        die "no CUDA toolkit found (include/cuda.h); set CUDA_HOME"
        return 1
    fi
    command -v nvcc >/dev/null || export PATH=$CUDA_ROOT/bin:$PATH
    if ! command -v nvcc >/dev/null; then
        die "nvcc not found (not on PATH, not in $CUDA_ROOT/bin)"
        return 1
    fi
    CXX=$(command -v g++ || command -v c++) || CXX=
    export CUDA_ROOT CXX
    echo "CUDA toolkit: $CUDA_ROOT; nvcc: $(command -v nvcc); C++: ${CXX:-none}"

    # Without a vendor file for the ICD loader bundled with PyOpenCL, point it at NVIDIA's
    # OpenCL library when the driver has one (so the OpenCL backend runs on the GPU too).
    if [ -z "${OCL_ICD_VENDORS:-}" ] && ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
        local ocl
        ocl=$(ldconfig -p 2>/dev/null | awk '$1 == "libnvidia-opencl.so.1" {print $NF; exit}')
        if [ -n "$ocl" ]; then
            mkdir -p "$WORK/icd"
            echo "$ocl" >"$WORK/icd/nvidia.icd"
            export OCL_ICD_VENDORS=$WORK/icd
            echo "OpenCL: OCL_ICD_VENDORS=$OCL_ICD_VENDORS ($ocl)"
        else
            echo "OpenCL: no ICD vendor file, no libnvidia-opencl.so.1: no OpenCL device"
        fi
    fi

    # Done once per machine: the stamp covers the carried files' contents (their times may
    # change with every copy), the interpreter and the toolkit.
    local stamp
    stamp=$(cd "$ROOT/.whl" && { find . -type f | sort | xargs sha256sum; echo "$PY $CUDA_ROOT"; } |
        sha256sum | cut -c1-16)
    if [ -f "$SITE/.gpu-session-$stamp" ] &&
        "$PY" -c 'import pyopencl, cffi, pycuda.compiler' 2>/dev/null; then
        echo "setup: carried packages and PyCUDA already installed ($SITE/.gpu-session-$stamp)"
    else
        mkdir -p "$SITE" "$WORK"
        if [ -z "$CXX" ]; then
            die "no C++ compiler (g++): PyCUDA cannot be built"
            return 1
        fi
        step "setup: carried wheels -> $SITE" "$PY" -m pip install -q --no-index --no-deps \
            --no-compile --no-cache-dir --upgrade --target "$SITE" "$ROOT"/.whl/*.whl || return 1
        install_pycuda || return 1
        rm -f "$SITE"/.gpu-session-*
        touch "$SITE/.gpu-session-$stamp"
    fi
    # $SITE also through a .pth file in the interpreter's site-packages: the C API's embedded
    # interpreter (tests/capi) adds those directories but gets no PYTHONPATH.
    local purelib
    purelib=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    if [ "$(cat "$purelib/gpu-session-site.pth" 2>/dev/null)" != "$SITE" ]; then
        echo "$SITE" >"$purelib/gpu-session-site.pth" ||
            echo "WARNING: cannot write $purelib/gpu-session-site.pth (C API tests will fail)"
    fi
    # sapporo: editable, i.e. this checkout's files; again only if the installed one maps
    # sapporo.kernels_cuda somewhere else (checked from /, away from the checkout).
    if (cd / && "$PY" -c 'import sys, sapporo.kernels_cuda as k
sys.exit(list(k.__path__) != [sys.argv[1]])' "$ROOT/kernels_cuda") 2>/dev/null; then
        echo "setup: sapporo already installed from $ROOT"
    else
        export -f install_sapporo
        step "setup: install sapporo (editable)" bash -c install_sapporo || return 1
    fi

    step --info "info: nvidia-smi" nvidia-smi \
        --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    step --info "info: nvcc --version" nvcc --version
    export -f versions
    step --info "info: versions" bash -c versions
    step --info "info: sapporo info" "${SAPPORO[@]}" info
    return 0
}

# ---------------------------------------------------------------------------------------
# stages

# Tests that need OpenCL or PoCL skip themselves (with the reason) where there is none.
# --maxfail rather than -x: a first run on a GPU should show every failure in one call.
stage_check() {
    local to=()
    "$PY" -c 'import pytest_timeout' 2>/dev/null && to=(--timeout=300)
    step "pytest CUDA backend + CUDA compile tests" env SAPPORO_BACKEND=cuda \
        "$PY" -m pytest tests/backend/test_cuda.py tests/kernels/test_cuda_compile.py \
        -q -rs -p no:cacheprovider "${to[@]}" --junitxml="$ST/junit-cuda.xml"
    step "pytest whole suite (cuda, opencl)" env SAPPORO_BACKEND=cuda \
        SAPPORO_TEST_BACKENDS=cuda,opencl "$PY" -m pytest --maxfail=25 -q -rs \
        -p no:cacheprovider "${to[@]}" --durations=15 --junitxml="$ST/junit-suite.xml"
}

# Peak GFLOP/s of an sm_90 GPU for the bench's fraction of peak: per SM and clock 128 FP32
# and 64 FP64 fused multiply-adds (2 flops each), at the maximum SM clock of nvidia-smi.
peak_gflops() {
    local mhz
    mhz=$(nvidia-smi --query-gpu=clocks.max.sm --format=csv,noheader,nounits 2>/dev/null |
        head -1 | tr -dc '0-9')
    [ -n "$mhz" ] || return 0
    "$PY" - "$mhz" <<'EOF' 2>/dev/null
import sys
import pycuda.driver as drv
drv.init()
dev = drv.Device(0)
if dev.compute_capability()[0] == 9:
    sms = dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    ghz = int(sys.argv[1]) / 1000
    print(f"double-single={sms * 256 * ghz:.0f},double={sms * 128 * ghz:.0f}")
EOF
}

stage_bench() {
    export SAPPORO_PROFILE_DIR=$WORK/profiles
    mkdir -p "$SAPPORO_PROFILE_DIR"
    # powers of two and one past each block boundary (warp 32, the table's ranges): padding
    # cliffs show only off the powers of two
    local peak na=1,2,4,8,9,16,32,33,64,65,128,129,256,257,512,513,1024
    peak=$(peak_gflops)
    echo "peak GFLOP/s for the fraction of peak: ${peak:-unknown}"
    echo "tuning profiles in $SAPPORO_PROFILE_DIR (used with BENCH_LAUNCH=auto):" \
        "$(find "$SAPPORO_PROFILE_DIR" -name '*.json' -printf '%f ')"
    local common=(bench --backend cuda --n 131072 --sweep-n 131072 --n-active "$na"
        --launch "${BENCH_LAUNCH:-auto}")
    [ -z "$peak" ] || common+=(--peak-gflops "$peak")
    step "bench order 4 double-single+double, peers cupy+torch" "${SAPPORO[@]}" \
        "${common[@]}" --orders 4 --precisions double-single,double --peers cupy,torch \
        --out "$ST/order4"
    step "bench order 6 double-single" "${SAPPORO[@]}" "${common[@]}" --orders 6 \
        --precisions double-single --peers none --out "$ST/order6"
}

stage_latency() {
    step "block steps on the engine's CUDA road (Python API and C API)" \
        "${SAPPORO[@]}" bench --block-step --capi --backend cuda --orders 4 \
        --precisions double-single --n 16k,64k --n-active 1,16,256 --no-plots \
        --out "$ST/block-step"
    local limit sweep=(bench --backend cuda --orders 4 --precisions double-single --n 16k
        --sweep-n 131072 --n-active 1,2,4,8,9,16,32,33,64 --peers none --no-plots
        --launch "${BENCH_LAUNCH:-auto}")
    for limit in 0 65536; do
        step "N_active sweep, GPU_HOST_REDUCE_MAX=$limit" "$PY" -c '
import sys
import sapporo.core.device
from sapporo.cli import main
sapporo.core.device.GPU_HOST_REDUCE_MAX = int(sys.argv[1])
sys.exit(main(sys.argv[2:]))' "$limit" "${sweep[@]}" --out "$ST/host-reduce-$limit"
    done
}

stage_tune() {
    local v order precision extra=()
    read -r -a extra <<<"${TUNE_ARGS:-}"
    for v in ${TUNE_VARIANTS:-4:double-single 6:double-single 4:double}; do
        order=${v%%:*} precision=${v#*:}
        step "tune order $order $precision" "${SAPPORO[@]}" tune --backend cuda \
            --order "$order" --precision "$precision" "${extra[@]}" --out "$WORK/profiles"
    done
    mkdir -p "$ST/profiles"
    cp "$WORK"/profiles/*.json "$ST/profiles/" 2>/dev/null
    ls -l "$ST/profiles"
}

stage_sanitize() {
    local cs f
    cs=$(command -v compute-sanitizer) || cs=
    for f in "$CUDA_ROOT"/bin/compute-sanitizer "$CUDA_ROOT"/compute-sanitizer/compute-sanitizer \
        $(find /usr/local /opt -maxdepth 7 -name compute-sanitizer -type f 2>/dev/null); do
        [ -n "$cs" ] || [ ! -x "$f" ] || cs=$f
    done
    echo "compute-sanitizer: ${cs:-not found}"
    cat >"$ST/sanitize_run.py" <<'EOF'
"""N = 300 through sapporo.Library(backend="cuda"): orders 4 and 6, both precisions,
neighbour lists on, 1 to 300 active particles, the built-in launch table and three more
shapes (lanes not a power of two, a partial last warp, tiles from global memory); results
checked against the reference (1e-12 double, 1e-5 double-single; neighbours exact in
double)."""
import sys

import numpy as np

import sapporo
from sapporo.core.launch import LaunchConfig, LaunchTable
from sapporo.reference import forces, plummer

n, eps2, h2 = 300, 1e-4, 0.05
x, v, m = plummer(n, seed=1)
ids = np.arange(n)
acc = np.random.default_rng(2).normal(scale=0.3, size=(n, 3))
shapes = LaunchTable([
    (4, LaunchConfig(li=4, lj=3, w=1, jt=24, use_local=True)),
    (32, LaunchConfig(li=5, lj=4, w=1, jt=40, use_local=True)),
    (1 << 30, LaunchConfig(li=16, lj=2, w=1, jt=64, use_local=False)),
], source="sanitize shapes")
bad = 0
for order in (4, 6):
    a = acc if order == 6 else None
    for precision in ("double-single", "double"):
        tol = 1e-12 if precision == "double" else 1e-5
        for table in (None, shapes):
            worst = 0.0
            with sapporo.Library(order=order, precision=precision, backend="cuda") as lib:
                if table is not None:
                    lib.set_launch_table(table)
                lib.set_j_particles(ids, ids, 0.0, m, x, v, a=a)
                lib.set_time(0.0)
                for ni in (1, 3, 20, 100, 300):
                    i = slice(0, ni)
                    ai = None if a is None else a[i]
                    if ni == 100:  # the asynchronous path
                        f = lib.start_compute(x[i], v[i], ids[i], eps2, h2=h2, a=ai).result()
                    else:
                        f = lib.compute(x[i], v[i], ids[i], eps2, h2=h2, a=ai)
                    ref = forces(x[i], v[i], ids[i], x, v, m, ids, eps2, order=order, ai=ai,
                                 aj=a, h2=h2)
                    worst = max(worst, float(np.max(
                        np.abs(f.acc - ref.acc).sum(1) / ref.acc_abs)))
                    if precision == "double":
                        for k in range(ni):
                            if not np.array_equal(f.neighbours(k), ref.neighbours[k]):
                                print(f"  neighbours of {k} differ (ni {ni})")
                                bad += 1
                                break
            ok = worst < tol
            bad += not ok
            print(f"order {order} {precision:13s} "
                  f"{'default table' if table is None else 'extra shapes '}: "
                  f"max acc error {worst:.2e} {'ok' if ok else 'TOO LARGE'}")
print("all ok" if not bad else f"{bad} problem(s)")
sys.exit(1 if bad else 0)
EOF
    # (the sanitizers run even when this fails: memcheck may say why)
    step "sanitize: plain run (builds the kernels)" "$PY" "$ST/sanitize_run.py"
    if [ -z "$cs" ]; then
        die "compute-sanitizer not found"
        return 1
    fi
    local tool opts
    for tool in memcheck racecheck synccheck initcheck; do
        opts=(--tool "$tool" --error-exitcode 3 --print-limit 50)
        [ "$tool" != memcheck ] || opts+=(--leak-check full)
        step "compute-sanitizer --tool $tool" "$cs" "${opts[@]}" "$PY" "$ST/sanitize_run.py"
    done
}

# ---------------------------------------------------------------------------------------

summary() {
    local row status secs name gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    echo
    echo "==== summary: stage $STAGE on ${gpu:-no GPU seen}," \
        "$(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
    printf '%-14s %6s  %s\n' status seconds step
    for row in "${ROWS[@]}"; do
        IFS='|' read -r status secs name <<<"$row"
        printf '%-14s %6s  %s\n' "$status" "$secs" "$name"
    done
    if [ "$FAILED" -eq 0 ]; then echo "stage $STAGE: OK"; else echo "stage $STAGE: FAILED"; fi
}

main() {
    rm -rf "$ST"
    mkdir -p "$ST"
    if setup; then
        case $STAGE in
            check) stage_check ;;
            bench) stage_bench ;;
            latency) stage_latency ;;
            tune) stage_tune ;;
            sanitize) stage_sanitize ;;
        esac
    else
        FAILED=1
    fi
    if [ -n "$(ls -A "$ST")" ]; then
        tar -czf "$OUT/$STAGE-files.tar.gz" -C "$WORK" "$STAGE" &&
            echo "files: $OUT/$STAGE-files.tar.gz ($(du -h "$OUT/$STAGE-files.tar.gz" | cut -f1))"
    fi
    summary | tee "$OUT/$STAGE-summary.txt"
    return "$FAILED"
}

mkdir -p "$OUT"
main 2>&1 | tee "$OUT/$STAGE.log"
exit "${PIPESTATUS[0]}"
