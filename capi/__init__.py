"""The GRAPE-6 interface for C and Fortran programs (``libsapporo.so``, ``libg6.so``).

``build.py`` builds the library with cffi's embedding support from ``shim.c`` (the C half)
and ``bridge.h`` (the functions implemented in Python by :mod:`sapporo.capi.bridge`);
``grape6.h`` and ``sapporo.h`` are the installed headers.  See ``docs/capi.md`` and
``sapporo capi --help``.
"""
