"""Measuring the library: benchmarks (:mod:`.bench`), peers measured in the same run
(:mod:`.peers`), block-step latency (:mod:`.latency`), tuning (:mod:`.tuning`), accuracy
against the float64 reference (:mod:`.accuracy`) and the figures (:mod:`.plots`)."""
