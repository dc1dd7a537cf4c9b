"""The CUDA kernel tree compiles, and matches the OpenCL tree it mirrors.

Without a GPU: every variant of every ``kernels_cuda/*.cu`` is compiled by ``nvcc`` to PTX
for sm_90 and for the oldest architecture nvcc still supports among sm_70/sm_75, with the
backend's options and warnings as errors (PyCUDA turns any compiler output into Python
warnings, so a clean build means no output at all); the PTX must hold the file's entry
points. The library's default GPU launch shapes also go through ptxas (``-cubin``), which
checks shared-memory and register limits. The ``#error`` checks must fire. Kernel names,
argument lists, macro defaults and row constants are compared with ``kernels_opencl/``
after preprocessing (needs ``cpp``, not nvcc).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from sapporo.backend import quirks
from sapporo.backend.base import load_source, shared_include_dir

ROOT = Path(__file__).resolve().parents[2]
CUDA_DIR = ROOT / "kernels_cuda"
OPENCL_DIR = ROOT / "kernels_opencl"
NVCC = shutil.which("nvcc")
CPP = shutil.which("cpp")
ENTRIES = {"predict.cu": ("scatter_j", "predict"), "force.cu": ("force", "reduce"),
           "selftest.cu": ("axpb", "grid2d")}
OPENCL_TWIN = {name: name.replace(".cu", ".cl") for name in ENTRIES}

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
needs_cpp = pytest.mark.skipif(CPP is None, reason="no C preprocessor (cpp) installed")


def _defs(**kw: int) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(kw.items()))


# The physics variants of each file (predict does not depend on NGB or the launch shape).
BASE = [_defs(ORDER=o, PRECISION=p) for o in (2, 4, 6, 8) for p in (1, 2)]
FORCE = [_defs(ORDER=o, PRECISION=p, NGB=n) for o in (2, 4, 6, 8) for p in (1, 2)
         for n in (0, 1)]
# Launch shapes: warp shuffles (LJ <= 32), shuffles then shared memory (LJ > 32), shared
# memory only (LJ not a power of two), tiles from global memory, a partial last warp.
SHAPES = [
    _defs(LI=8, LJ=32, JT=256),
    _defs(LI=1, LJ=128, JT=128),
    _defs(LI=4, LJ=3, JT=24),
    _defs(LI=16, LJ=2, JT=64, USE_LOCAL=0),
    _defs(LI=5, LJ=4, JT=40),
    _defs(LI=64, LJ=1, W=2, JT=128),  # two i-particles per thread
    _defs(LI=32, LJ=1, W=4, JT=64, USE_LOCAL=0),
]
HEAVY = [_defs(ORDER=6, PRECISION=2, NGB=1), _defs(ORDER=4, PRECISION=1, NGB=1),
         _defs(ORDER=8, PRECISION=2, NGB=1)]


def gpu_default_shapes() -> list[tuple[tuple[str, int], ...]]:
    """The launch shapes of ``sapporo.core.launch.default_table`` for GPUs (as defines)."""
    from sapporo.backend.base import DeviceInfo
    from sapporo.core.launch import default_table

    info = DeviceInfo("cuda", 0, "any GPU", "NVIDIA Corporation", "CUDA", "gpu", 100, 1024,
                      49152, 1 << 34, True, "")
    shapes = []
    for _, cfg in default_table(info, 6, "double").entries:
        d = dict(cfg.defines())
        assert d["W"] in (1, 2, 4) and (d["W"] == 1 or d["LJ"] == 1), "not a CUDA shape"
        shapes.append(tuple(sorted(d.items())))
    return shapes


def variants(arch: str = "sm_90") -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """(file, defines) of every PTX compile for ``arch``; ``()`` is the all-defaults build.

    The launch shapes change no architecture-specific code, so they are compiled for sm_90
    only (the oldest architecture gets the physics matrix).
    """
    out = [("predict.cu", ()), ("force.cu", ())]
    if arch == "sm_90":
        out += [("selftest.cu", ()), ("selftest.cu", _defs(SCALE=3))]
    out += [("predict.cu", d) for d in BASE]
    out += [("force.cu", d) for d in FORCE]
    if arch == "sm_90":
        out += [("force.cu", tuple(sorted(h + s))) for h in HEAVY for s in SHAPES]
    return out


def _label(defines: tuple[tuple[str, int], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in defines) or "defaults"


@cache
def supported_archs() -> frozenset[str]:
    """``sm_XX`` for every ``compute_XX`` that ``nvcc --list-gpu-arch`` lists."""
    res = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True, timeout=60)
    return frozenset("sm_" + a.split("_", 1)[1] for a in res.stdout.split() if "_" in a)


@cache
def nvcc_release() -> str:
    res = subprocess.run([NVCC, "--version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"release ([0-9.]+)", res.stdout)
    return m.group(1) if m else "?"


def arch_skip_reason(arch: str) -> str | None:
    """Why ``arch`` is not compiled here (None: it is)."""
    have = supported_archs()
    if arch == "sm_70" and arch not in have:
        return (f"nvcc {nvcc_release()} no longer supports sm_70 (Volta): `nvcc --list-gpu-arch` "
                "has no compute_70; sm_75 is the oldest architecture compiled")
    if arch == "sm_75" and "sm_70" in have:
        return "sm_70 is supported by this nvcc and is compiled as the oldest architecture"
    if arch not in have:
        return f"nvcc {nvcc_release()} does not support {arch}"
    return None


def nvcc(fname: str, defines: tuple[tuple[str, int], ...], arch: str, target: str = "ptx",
         source: str | None = None) -> tuple[int, str, str]:
    """Compile one variant; returns (exit status, compiler output, PTX text or "")."""
    with tempfile.TemporaryDirectory(prefix="sapporo-nvcc-") as tmp:
        out = Path(tmp) / f"out.{target}"
        src = CUDA_DIR / fname
        if source is not None:
            src = Path(tmp) / fname
            src.write_text(source)
        cmd = [NVCC, f"--{target}", f"-arch={arch}", "--Werror", "all-warnings",
               *quirks.cuda_build_options(), f"-I{shared_include_dir()}",
               *(f"-D{k}={v}" for k, v in defines),
               "-o", str(out), str(src)]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=CUDA_DIR, timeout=300)
        text = out.read_text() if target == "ptx" and res.returncode == 0 else ""
        return res.returncode, (res.stdout + res.stderr).strip(), text


ARCHS = ["sm_70", "sm_75", "sm_90"]


@pytest.fixture(scope="module")
def ptx_builds() -> dict[tuple[str, str, tuple[tuple[str, int], ...]], tuple[int, str, str]]:
    """Every PTX variant for every compiled architecture, two nvcc processes at a time."""
    if NVCC is None:
        pytest.skip("nvcc (CUDA toolkit) is not installed")
    jobs = [(f, d, a) for a in ARCHS if arch_skip_reason(a) is None for f, d in variants(a)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: nvcc(job[0], job[1], job[2]), jobs))
    return dict(zip(jobs, results, strict=True))


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_every_variant_compiles_to_ptx(ptx_builds: dict, arch: str) -> None:
    reason = arch_skip_reason(arch)
    if reason:
        pytest.skip(reason)
    failures = []
    for fname, defines in variants(arch):
        rc, output, ptx = ptx_builds[(fname, defines, arch)]
        what = f"{fname} [{_label(defines)}] for {arch}"
        if rc != 0:
            failures.append(f"{what}: exit status {rc}\n{output}")
        elif output:
            failures.append(f"{what}: compiler said\n{output}")
        else:
            for entry in ENTRIES[fname]:
                if not re.search(rf"\.entry\s+{entry}\s*\(", ptx):
                    failures.append(f"{what}: PTX has no entry point {entry}")
    assert not failures, "\n\n".join(failures)


@needs_nvcc
def test_all_four_entry_points(ptx_builds: dict) -> None:
    found = set()
    for fname in ("predict.cu", "force.cu"):
        rc, output, ptx = ptx_builds[(fname, (), "sm_90")]
        assert rc == 0, output
        found |= set(re.findall(r"\.visible\s+\.entry\s+(\w+)\s*\(", ptx))
    assert found == {"scatter_j", "predict", "force", "reduce"}  # the force library's four


@needs_nvcc
@pytest.mark.parametrize("fname", ["force.cu", "predict.cu"])
def test_inlined_source_compiles(fname: str) -> None:
    """The backend compiles load_source() output (includes inlined), not the file itself."""
    source = load_source("cuda", fname)
    assert "#include" not in source
    rc, output, ptx = nvcc(fname, _defs(ORDER=6, PRECISION=1, NGB=1), "sm_90", source=source)
    assert rc == 0 and not output, output
    assert all(f".entry {e}(" in ptx for e in ENTRIES[fname])


@needs_nvcc
@pytest.mark.slow
def test_default_gpu_shapes_pass_ptxas() -> None:
    jobs = [tuple(sorted(HEAVY[0] + s)) for s in gpu_default_shapes()]  # most shared memory
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda d: nvcc("force.cu", d, "sm_90", target="cubin"), jobs))
    failures = [f"[{_label(d)}]: {out}" for d, (rc, out, _) in zip(jobs, results, strict=True)
                if rc != 0 or out]
    assert not failures, "\n".join(failures)


@needs_nvcc
@pytest.mark.parametrize("fname", ["force.cu", "predict.cu"])
@pytest.mark.parametrize(
    ("defines", "message"),
    [
        (_defs(ORDER=3), "ORDER must be 2, 4, 6 or 8"),
        (_defs(PRECISION=3), "PRECISION must be 1"),
        (_defs(W=8), "W must be 1, 2 or 4 on CUDA"),
        (_defs(W=2, LJ=4), "W > 1 needs LJ == 1"),
    ],
    ids=["ORDER=3", "PRECISION=3", "W=8", "W=2-LJ=4"],
)
def test_error_checks_fire(fname: str, defines: tuple, message: str) -> None:
    rc, output, _ = nvcc(fname, defines, "sm_90")
    assert rc != 0, f"{fname} compiled with {_label(defines)}"
    assert message in output


# --------------------------------------------------------------------------- vs OpenCL


def preprocess(path: Path, defines: tuple[tuple[str, int], ...]) -> str:
    """The file after the C preprocessor (CUDA built-ins are not needed for signatures)."""
    cmd = [CPP, "-P", "-xc++", f"-I{shared_include_dir()}", *(f"-D{k}={v}" for k, v in defines),
           str(path)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=path.parent, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


_TYPE_ALIASES = {"dbl4": "double4", "double4_32a": "double4", "double4_16a": "double4"}


def _tokens(text: str) -> list[str]:
    words = re.findall(r"\w+|\*", text)
    return [_TYPE_ALIASES.get(w, w) for w in words if w not in ("__global", "__restrict__")]


def signatures(text: str) -> dict[str, list[str]]:
    """Kernel name -> normalised parameter list ("const double4 * raw"), typedefs resolved."""
    typedefs = {name: " ".join(_tokens(target))
                for target, name in re.findall(r"typedef\s+([\w\s]+?)\s+(\w+)\s*;", text)}
    out = {}
    for m in re.finditer(r"(?:__kernel|__global__)[^{;]*?\bvoid\s+"
                         r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(", text):
        depth, k = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        params = []
        for p in text[m.end():k - 1].split(","):
            toks = [t for w in _tokens(p) for t in typedefs.get(w, w).split()]
            if toks:
                params.append(" ".join(toks))
        out[m.group(1)] = params
    return out


@needs_cpp
@pytest.mark.parametrize("fname", sorted(ENTRIES))
@pytest.mark.parametrize("defines", FORCE, ids=_label)
def test_signatures_match_opencl(fname: str, defines: tuple) -> None:
    cuda = signatures(preprocess(CUDA_DIR / fname, defines))
    opencl = signatures(preprocess(OPENCL_DIR / OPENCL_TWIN[fname], defines))
    assert sorted(cuda) == sorted(ENTRIES[fname])
    assert cuda == opencl


def _macros(path: Path) -> dict[str, str]:
    """``#define NAME value`` lines of a header (the first definition of each name)."""
    out: dict[str, str] = {}
    for name, value in re.findall(r"^#define\s+(\w+)[ \t]+([^/\n]*?)\s*(?:/\*.*)?$",
                                  path.read_text(), re.MULTILINE):
        out.setdefault(name, value)
    return out


def test_variants_and_layout_are_shared() -> None:
    """The variant macros' defaults and the data layout are not written in either tree
    but included from the shared headers (sapporo/variants.h, sapporo/layout.h)."""
    names = ["ORDER", "PRECISION", "NGB", "LI", "LJ", "W", "USE_LOCAL", "JT", "NB_CAP",
             "PRED_TERMS"]
    shared = _macros(ROOT / "sapporo" / "variants.h")
    assert all(shared.get(n) for n in names), shared
    for path in (CUDA_DIR / "common.cuh", OPENCL_DIR / "common.h"):
        text = path.read_text()
        for header in ("layout.h", "variants.h"):
            assert re.search(rf'^#include "{header}"$', text, re.MULTILINE), (path, header)
        own = [n for n in _macros(path)
               if n in names or re.match(r"(RAW|IC|OC|REDUCE)_|NC[IO]$", n)]
        assert own == [], f"{path.name} defines shared macros itself: {own}"
    for path in (CUDA_DIR / "pm.cu", OPENCL_DIR / "pm.cl"):
        text = path.read_text()
        assert re.search(r'^#include "pm_window.h"$', text, re.MULTILINE), path
        assert "FOR_WINDOW_CELLS(xp" not in text, f"{path.name} defines the window itself"


@needs_cpp
@pytest.mark.parametrize("defines", FORCE, ids=_label)
def test_argument_tables_match_both_trees(defines) -> None:
    """The library builds every kernel's argument list by name from sapporo.core.layout's tables:
    in each variant, the names and their order are those of the kernel signatures, in the
    CUDA tree and in the OpenCL tree."""
    from sapporo.core import layout

    d = dict(defines)
    order, ds, ngb = d["ORDER"], d["PRECISION"] == 1, bool(d["NGB"])
    for fname in ("force.cu", "predict.cu"):
        for path in (CUDA_DIR / fname, OPENCL_DIR / OPENCL_TWIN[fname]):
            sigs = signatures(preprocess(path, defines))
            for kernel, params in sigs.items():
                names = [p.split()[-1] for p in params]
                want = layout.arg_names(layout.KERNELS[kernel], order, ds, ngb)
                assert names == want, (path.name, kernel)
