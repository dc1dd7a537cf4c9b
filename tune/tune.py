"""Tune the force kernels' launch parameters on this machine (wraps ``sapporo tune``).

Usage::

    python tune/tune.py [--ship] [sapporo tune options]

``--ship`` writes the profiles into ``tune/profiles/`` next to this script (the profiles
shipped with the package) instead of the user profile folder. Every other option is
``sapporo tune``'s (see ``sapporo tune --help``).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Run ``sapporo tune`` with ``argv``; ``--ship`` targets ``tune/profiles/``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--ship" in args:
        args.remove("--ship")
        args += ["--out", str(Path(__file__).resolve().parent / "profiles")]
    from sapporo.cli import main as cli_main

    return cli_main(["tune", *args])


if __name__ == "__main__":
    sys.exit(main())
