"""Integrators and their data: the Hermite integrators (:mod:`.hermite`), initial
conditions (:mod:`.ic`), snapshots (:mod:`.snapshot`) and whole-or-nothing file writes
(:mod:`.fileio`)."""
