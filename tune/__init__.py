"""Launch-parameter tuning data: ``profiles/*.json`` are tuning profiles shipped with sapporo.

A profile holds the launch configurations of the force kernels for one backend, device,
order and precision (see :mod:`sapporo.core.launch` for the format and
:mod:`sapporo.perf.tuning` for how they are made). ``tune.py`` regenerates them:
``python tune/tune.py --ship``.
"""
