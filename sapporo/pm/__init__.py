"""Particle-mesh gravity on the sapporo backend layer.

:class:`ParticleMesh` computes accelerations and potentials of particles through a mesh
(mass assignment, Poisson by FFT or multigrid, finite-difference gradient, interpolation);
:class:`Leapfrog` integrates a system with it (kick-drift-kick, on the device). See
docs/pm.md for the design and the accuracy figures.
"""

from .mesh import ParticleMesh, PMResult

__all__ = ["PMResult", "ParticleMesh"]
