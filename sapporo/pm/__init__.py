"""Particle-mesh gravity on the sapporo backend layer.

:class:`ParticleMesh` computes accelerations and potentials of particles through a mesh
(mass assignment, Poisson by FFT or multigrid, finite-difference gradient, interpolation);
:class:`Leapfrog` integrates a system with it (kick-drift-kick, on the device);
:class:`P3M` adds a direct short-range sum to a split mesh force. See
docs/pm.md for the design and the accuracy figures.
"""

from sapporo.pm.integrator import Leapfrog
from sapporo.pm.mesh import ParticleMesh, PMResult
from sapporo.pm.p3m import P3M

__all__ = ["Leapfrog", "P3M", "PMResult", "ParticleMesh"]
