#!/usr/bin/env bash
# Fetch, on a machine with access to PyPI, what the lent GPU machine lacks, into .whl/ at
# the repository root (git-ignored; carried to the device with carry [".whl"]).
#
#   bash tune/gpu_fetch.sh
#
# The device has Python 3.12 (x86-64, manylinux) with numpy 2.x, setuptools, wheel, pytest,
# CuPy and PyTorch, nvcc and the CUDA toolkit, and no network. It lacks PyOpenCL and its
# dependencies (pytools, siphash24, platformdirs), cffi/pycparser (sapporo's C API) and
# PyCUDA (built there from the source distribution by tune/gpu_session.sh; PyCUDA publishes
# no Linux wheels) with its dependency Mako (MarkupSafe and typing_extensions are already
# there, as dependencies of PyTorch).
#
# Also, unless --no-prebuilt is given, a fallback: PyCUDA built here into a cp312 wheel
# (.whl/prebuilt/), which tune/gpu_session.sh installs when the build on the device fails
# (no Python headers there, say) or when PYCUDA_FROM=prebuilt. That needs a Python 3.12
# (PYTHON312, else python3.12 or ~/.pyenv/versions/3.12*), g++ and the CUDA toolkit's
# cuda.h here (CUDA_HOME, default /usr/local/cuda); it takes a few minutes. The wheel links
# to libcuda.so.1 by name (through a stub made from cuda.h), i.e. to the device's driver.
#
# One pinned version of each; the folder is replaced as a whole, so nothing stale stays.
# Environment: PYTHON (default python3) runs pip; any Python >= 3.8 will do.
set -euo pipefail

PREBUILT=1
case ${1:-} in
    "") ;;
    --no-prebuilt) PREBUILT=0 ;;
    *)
        echo "usage: bash tune/gpu_fetch.sh [--no-prebuilt]" >&2
        exit 2
        ;;
esac

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEST=.whl
MAX_MIB=40

# Binary (or pure-Python) wheels for CPython 3.12 on manylinux x86-64.
WHEELS=(
    pyopencl==2026.1.4
    pytools==2026.1.1
    siphash24==1.9
    platformdirs==4.14.5
    cffi==2.1.1
    pycparser==3.12
    mako==1.4.3
)
# Source distribution, built on the device against its CUDA toolkit.
# Build requirements (pycuda's pyproject.toml): setuptools, wheel, numpy>=1.24 (all on the
# device); run-time requirements (setup.py): pytools, platformdirs, mako (in WHEELS).
SDIST=pycuda==2026.1

PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)

tmp=$(mktemp -d "$PWD/${DEST}.tmp.XXXXXX")
chmod 755 "$tmp" # mktemp makes it private
trap 'rm -rf "$tmp"' EXIT

plat_args=()
for p in "${PLATFORMS[@]}"; do plat_args+=(--platform "$p"); done

echo "== wheels (cp312, manylinux x86_64)"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none "${plat_args[@]}" \
    -d "$tmp" "${WHEELS[@]}"

echo "== source distribution: $SDIST"
# --no-binary for pycuda only: its build requirements may come as wheels (pip prepares the
# sdist's metadata in an isolated environment; that takes ~30 s).
"$PY" -m pip download --quiet --no-deps --no-binary="${SDIST%%==*}" -d "$tmp" "$SDIST"

# exactly one file per pinned package, of the pinned version
lower() { tr '[:upper:]' '[:lower:]' <<<"$1"; }
status=0
for spec in "${WHEELS[@]}" "$SDIST"; do
    name=$(lower "${spec%%==*}") version=${spec##*==}
    name=${name//-/_}
    n=0
    for f in "$tmp"/*; do
        base=$(lower "$(basename "$f")")
        case $base in "${name}-${version}-"*.whl | "${name}-${version}.tar.gz") n=$((n + 1)) ;; esac
    done
    if [ "$n" -ne 1 ]; then
        echo "ERROR: expected one file for $spec, found $n" >&2
        status=1
    fi
done
nfiles=$(find "$tmp" -maxdepth 1 -type f | wc -l)
if [ "$nfiles" -ne $((${#WHEELS[@]} + 1)) ]; then
    echo "ERROR: $nfiles files downloaded, expected $((${#WHEELS[@]} + 1))" >&2
    status=1
fi
[ "$status" -eq 0 ] || exit 1

find_python312() {
    local p
    for p in "${PYTHON312:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 \
        /usr/bin/python3.12 /usr/local/bin/python3.12; do
        if [ -n "$p" ] && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
            2>/dev/null; then
            command -v "$p"
            return 0
        fi
    done
    return 1
}

# PyCUDA as a cp312 wheel, built like tune/gpu_session.sh builds it on the device.
prebuild_pycuda() {
    local py312 cuda=${CUDA_HOME:-/usr/local/cuda} work src sdist
    if ! py312=$(find_python312); then
        echo "prebuilt PyCUDA: skipped (no Python 3.12 here; set PYTHON312)"
        return 0
    fi
    if [ ! -f "$cuda/include/cuda.h" ] || ! command -v g++ >/dev/null; then
        echo "prebuilt PyCUDA: skipped (needs $cuda/include/cuda.h and g++; set CUDA_HOME)"
        return 0
    fi
    echo "== prebuilt PyCUDA (cp312 wheel) with $py312 and $cuda"
    work=$(mktemp -d)
    "$py312" -m venv "$work/venv"
    "$work/venv/bin/pip" install --quiet numpy setuptools wheel
    # link-time stub of the driver library: every cu* function cuda.h declares
    mkdir -p "$work/stub"
    gcc -E -P "$cuda/include/cuda.h" | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' |
        tr -d ' (' | sort -u | sed 's/.*/int &(void) { return 999; }/' >"$work/stub/stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stub/libcuda.so" "$work/stub/stub.c"
    sdist=$(echo "$tmp"/pycuda-*.tar.gz)
    tar -xzf "$sdist" -C "$work"
    src=$(echo "$work"/pycuda-*/)
    (
        cd "$src"
        "$work/venv/bin/python" configure.py --cuda-root="$cuda" \
            --cudadrv-lib-dir="$work/stub" --no-cuda-enable-curand --cxxflags=-g0 >/dev/null
        printf '\n[build_ext]\nparallel = %s\n' "$(nproc)" >>setup.cfg
        "$work/venv/bin/pip" wheel --quiet --no-deps --no-build-isolation --no-index \
            -w "$tmp/prebuilt" .
    )
    local so
    so=$(cd "$work" && "$work/venv/bin/python" -m zipfile -e "$tmp"/prebuilt/pycuda-*.whl x &&
        ls "$work"/x/pycuda/_driver*.so)
    if ! readelf -d "$so" | grep -q 'NEEDED.*libcuda\.so\.1'; then
        echo "ERROR: the prebuilt _driver does not link libcuda.so.1" >&2
        return 1
    fi
    echo "needs: $(objdump -T "$so" | grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -1)," \
        "$(objdump -T "$so" | grep -oE 'GLIBCXX_[0-9.]+' | sort -uV | tail -1)"
    rm -rf "$work"
}
[ "$PREBUILT" -eq 0 ] || prebuild_pycuda

rm -rf "$DEST"
mv "$tmp" "$DEST"
trap - EXIT

ls -lR "$DEST"
bytes=$(find "$DEST" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
echo "total: $bytes bytes ($mib MiB) in $DEST/ (carry limit 64 MiB)"
if [ "$bytes" -gt $((MAX_MIB * 1048576)) ]; then
    echo "ERROR: more than $MAX_MIB MiB" >&2
    exit 1
fi
