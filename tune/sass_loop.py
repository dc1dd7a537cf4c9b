"""Count the machine instructions per interaction in the CUDA force kernel's inner loop.

No GPU needed: nvcc compiles ``kernels_cuda/force.cu`` to a cubin, ``cuobjdump -sass``
disassembles it, and the inner j-loop (the largest backward branch with a reciprocal square
root and no barrier in it) is counted. Instructions per interaction bound the speed: an
SM issues at most 4 warp instructions per clock (128 thread instructions), so a GPU of
``sms`` multiprocessors at ``ghz`` runs at most ``sms * 128 * ghz / count`` interactions
per second, whatever the memory does (in double also at most ``sms * 64 * ghz / fp64``,
the FP64 units doing 64 per clock). Usage::

    python tune/sass_loop.py [--arch sm_90] [--sms 132] [--ghz 1.755,1.98] [-DLI=128 ...]

``cuobjdump`` comes with the CUDA toolkit, or from PyPI (``pip install
nvidia-cuda-cuobjdump``); the script looks on PATH and in that package.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = [(2, 1), (4, 1), (6, 1), (2, 2), (4, 2), (6, 2)]
SHAPE = ["-DLI=128", "-DLJ=1", "-DJT=128", "-DNGB=0"]  # the GPU default for large blocks


def find_cuobjdump() -> str | None:
    """cuobjdump on PATH, else from the nvidia-cuda-cuobjdump wheel."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for cand in Path(base).glob("*/bin/cuobjdump"):
            return str(cand)
    return None


def loop_body(sass: str) -> tuple[list[str], int]:
    """Instructions of the inner j-loop of ``force`` and its reciprocal square roots."""
    text = sass.split("Function : force", 1)[1].split("Function :", 1)[0]
    ins = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    best: tuple[list[str], int] = ([], 0)
    for addr, txt in ins:
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", txt)
        if not m or int(m.group(1), 16) >= addr:
            continue
        body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
        nrsq = sum("MUFU.RSQ" in t for t in body)
        if nrsq and not any("BAR.SYNC" in t for t in body) and len(body) > len(best[0]):
            best = (body, nrsq)
    return best


def opcode(txt: str) -> str:
    words = txt.split()
    word = words[1] if words[0].startswith("@") else words[0]
    return word.split(".")[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--sms", type=int, default=132, help="multiprocessors (H100 SXM: 132)")
    ap.add_argument("--ghz", default="1.755,1.98", help="clocks to give the bound at")
    args, defines = ap.parse_known_args(argv)
    nvcc, cuobjdump = shutil.which("nvcc"), find_cuobjdump()
    if nvcc is None or cuobjdump is None:
        print("needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump)", file=sys.stderr)
        return 2
    clocks = [float(g) for g in args.ghz.split(",")]
    head = " ".join(f"1e12 int/s @{g} GHz" for g in clocks)
    print(f"{'order':>5} {'precision':>13} {'instr/int':>9} {'regs':>4}  {head}  top opcodes")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "force.cubin"
        for order, prec in VARIANTS:
            shape = [d for d in SHAPE if d.split("=")[0] not in {e.split("=")[0] for e in defines}]
            cmd = [nvcc, "-cubin", f"-arch={args.arch}", "-Xptxas", "-v", f"-DORDER={order}",
                   f"-DPRECISION={prec}", *shape, *defines, "-o", str(cubin),
                   str(ROOT / "kernels_cuda" / "force.cu")]
            build = subprocess.run(cmd, capture_output=True, text=True, check=True)
            regs = re.findall(r"Used (\d+) registers", build.stderr)
            sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True,
                                  text=True, check=True).stdout
            body, nrsq = loop_body(sass)
            per = len(body) / nrsq
            ops = Counter(map(opcode, body))
            fp64 = sum(ops[k] for k in ("DADD", "DMUL", "DFMA")) / nrsq
            cols = []
            for g in clocks:
                # issue: 128 thread instructions per clock and SM; FP64 units: 64
                bound = args.sms * g * 1e9 * min(128 / per, 64 / fp64 if fp64 else 1e9)
                cols.append(f"{bound / 1e12:>{len(f'1e12 int/s @{g} GHz')}.3f}")
            bounds = " ".join(cols)
            top = " ".join(f"{k}:{v / nrsq:g}" for k, v in ops.most_common(6))
            name = "double-single" if prec == 1 else "double"
            print(f"{order:>5} {name:>13} {per:>9.1f} {max(map(int, regs)):>4}  {bounds}  {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
