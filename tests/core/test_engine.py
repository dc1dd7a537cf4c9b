"""The native engine (sapporo/core/engine.py, sapporo/core/_engine.c): the one executor.

Every force call runs in C on the library's plans. Block steps must agree with the float64
reference within the library's tolerances in every order and precision, on host memory,
device memory and the emulated CUDA; inputs it does not take as they are get converted or
the library's errors; and any state change (more addresses, new derivatives, another launch
table, a reset, a pending result) must make new plans, never leave C computing on stale
ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sapporo
from sapporo import config
from sapporo import reference as ref
from sapporo.core import engine
from sapporo.errors import InputError, NonFiniteError

EPS2 = 1e-4
H2_LISTS = 0.01  #: neighbour radius^2 of the steps with lists (a few neighbours each)


def _system(n: int, seed: int = 3):
    x, v, m = ref.plummer(n, seed=seed)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n) * 2 + 1
    a = rng.normal(scale=0.5, size=(n, 3))
    jerk = rng.normal(scale=0.5, size=(n, 3))
    return x, v, m, ids, a, jerk


def _open(order: int, precision: str, backend: str, **kw) -> sapporo.Library:
    return sapporo.Library(order=order, precision=precision, backend=backend, **kw)


def _same(r1, r2) -> None:
    for name in ("acc", "jerk", "snap", "crackle", "pot", "nn_index", "nn_r2"):
        a, b = getattr(r1, name), getattr(r2, name)
        if a is None or b is None:
            assert a is None and b is None, name
        else:
            assert a.dtype == b.dtype and a.shape == b.shape, name
            np.testing.assert_array_equal(a, b, err_msg=name)


def _device_records(lib) -> np.ndarray:
    """The device's copy of the j-records (host memory, or downloaded from the device)."""
    dev = lib._devs[0]
    if dev.h_raw is not None:
        return dev.h_raw
    lib._engine.wait()
    out = np.zeros((dev.cap, dev.raw_n, 4))
    dev.j["raw"].download(out)
    return out


def _engine_used(lib) -> bool:
    return lib._engine is not None and lib._engine.ran


def _steps(lib, system, order: int, precision: str, sizes, rng,
           h2: float | None = None) -> list:
    """Block steps (the j-particles stored, a new time, the forces on them, with neighbour
    lists of radius^2 ``h2`` if given), each result checked against the float64 reference.
    Returns per step (sel, t, result, whether the engine stored the batch, whether it
    computed the step)."""
    x, v, m, ids, a, jerk = system
    n = len(x)
    tj = np.zeros(n)
    out = []
    lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v, a=a, jerk=jerk)
    for k, ni in enumerate(sizes):
        sel = np.sort(rng.choice(n, ni, replace=False))
        t = 1e-3 * (k + 1)
        tj[sel] = t - 1e-3
        extra = {"jerk": jerk[sel]} if order >= 8 else {}
        lib.set_j_particles(sel, ids[sel], t - 1e-3, m[sel], x[sel], v[sel],
                            a=a[sel], jerk=jerk[sel])
        stored = lib._engine is not None  # (every store is the engine's)
        if lib._engine is not None:
            lib._engine.ran = False  # (set again by any launch of the engine)
        lib.set_time(t)
        if h2 is not None:
            extra["h2"] = np.full(ni, h2)
        res = lib.compute(x[sel], v[sel], ids[sel], EPS2, a=a[sel] if order >= 6 else None,
                          **extra)
        step = (sel, t, res, stored, _engine_used(lib))
        _near_reference(system, step, tj, order, precision, h2=h2)
        out.append(step)
    return out


def _near_reference(system, step, tj, order: int, precision: str,
                    h2: float | None = None) -> None:
    """A step's result against the float64 reference (j-particles predicted from tj); with
    ``h2``, its neighbour lists too (double-single may differ at near-ties only)."""
    x, v, m, ids, a, jerk = system
    sel, t, res = step[:3]
    xp, vp, ap = ref.predict(t, tj, x, v, a, jerk)
    want = ref.forces(x[sel], v[sel], ids[sel], xp, vp, m, ids, EPS2, order=order,
                      ai=a[sel] if order >= 6 else None, aj=ap if order >= 6 else None,
                      ji=jerk[sel] if order >= 8 else None, jj=jerk if order >= 8 else None,
                      h2=None if h2 is None else np.full(len(sel), h2))
    tol = 1e-4 if precision == "double-single" else 1e-10
    pairs = [(res.acc, want.acc), (res.pot, want.pot)]
    if order >= 4:
        pairs.append((res.jerk, want.jerk))
    for got, exp in pairs:
        assert np.abs(got - exp).max() <= tol * np.abs(exp).max()
    if h2 is None:
        return
    assert sum(w.size for w in want.neighbours) > 0  # the lists were not all empty
    id_row = {int(q): k for k, q in enumerate(ids)}
    for i in range(len(sel)):
        for j in np.setxor1d(res.neighbours(i), want.neighbours[i]):
            r2 = float(((xp[id_row[int(j)]] - x[sel[i]]) ** 2).sum())
            assert precision == "double-single" and abs(r2 - h2) <= 1e-5 * h2, (i, j, r2)


@pytest.mark.parametrize("precision", ["double-single", "double"])
@pytest.mark.parametrize("order", [2, 4, 6, 8])
def test_block_steps_against_the_reference(backend, order, precision):
    """Blocks of 1 to 130 particles, stored, moved on and computed in C: every result within
    the float64 reference's tolerance."""
    system = _system(700)
    lib = _open(order, precision, backend)
    try:
        steps = _steps(lib, system, order, precision, [1, 2, 1, 5, 16, 1, 130, 3] * 3,
                       np.random.default_rng(7))
        assert sum(s[4] for s in steps) >= 20  # the steps did run in C
        assert all(s[3] for s in steps[1:]), "a batch not stored by the engine"
    finally:
        lib.close()


def test_single_against_the_reference(backend):
    """precision='single' (order 2, for tree codes): blocks of 1 to 2000 particles within
    1e-5 of the sum of their pair terms' sizes (measured 2.7e-6; double-single 1.6e-7, PG5's
    float pairs 1e-3), the potential within 1e-6; refused at any other order."""
    n = 2000
    x, _, m = ref.plummer(n, seed=3)
    ids, zero = np.arange(n), np.zeros((n, 3))
    with _open(2, "single", backend) as lib:
        lib.set_j_particles(ids, ids, 0.0, m, x, zero)
        for ni in (1, 7, 130, n):
            got = lib.compute(x[:ni], zero[:ni], ids[:ni], EPS2)
            want = ref.forces(x[:ni], None, ids[:ni], x, None, m, ids, EPS2, order=2)
            assert ref.relative_vector_error(got.acc, want.acc, want.acc_abs).max() <= 1e-5
            assert (np.abs(got.pot - want.pot) / np.abs(want.pot)).max() <= 1e-6
    with pytest.raises(InputError, match="'single' is for order 2"):
        _open(4, "single", backend)


@pytest.mark.parametrize(("order", "precision"), [(2, "double-single"), (2, "double"),
                                                  (2, "single"), (4, "double-single")])
def test_without_ids_every_pair_counts(backend, order, precision):
    """ids=False (the GRAPE-5 contexts' kernels): the ids are not read. A particle's own
    pair counts (with softening: -m/eps in its potential, no force), as in the float64
    reference of every pair; no nearest neighbour; neighbour lists refused. Blocks of 1 (the
    lanes over j-particles on CPUs) to 600."""
    x, v, m, ids, _, _ = _system(600, seed=4)
    tol = {"double": 1e-12, "double-single": 1e-5, "single": 1e-5}[precision]
    with _open(order, precision, backend, ids=False) as lib:
        lib.set_j_particles(np.arange(600), ids, 0.0, m, x, v)
        for ni in (1, 5, 600):
            got = lib.compute(x[:ni], v[:ni], ids[:ni], EPS2)
            want = ref.forces(x[:ni], v[:ni], np.full(ni, -1), x, v, m, ids, EPS2, order=order)
            assert ref.relative_vector_error(got.acc, want.acc, want.acc_abs).max() <= tol
            assert (np.abs(got.pot - want.pot) / np.abs(want.pot)).max() <= tol
            if order == 4:
                assert ref.relative_vector_error(got.jerk, want.jerk,
                                                 want.jerk_abs).max() <= tol
            assert (got.nn_index == -1).all() and np.isinf(got.nn_r2).all()
        # the own pair's potential is in it: the sum over the others differs by m/eps
        others = ref.forces(x[:5], v[:5], ids[:5], x, v, m, ids, EPS2, order=order)
        got = lib.compute(x[:5], v[:5], ids[:5], EPS2)
        np.testing.assert_allclose(others.pot - got.pot, m[:5] / np.sqrt(EPS2), rtol=1e-4)
        with pytest.raises(InputError, match="neighbour lists need the ids"):
            lib.compute(x[:5], v[:5], ids[:5], EPS2, h2=0.01)
        with pytest.raises(InputError, match="neighbour lists need the ids"):
            lib.start_compute(x[:5], v[:5], ids[:5], EPS2, h2=np.full(5, 0.01))
    with pytest.raises(InputError, match="ids: expected True or False"):
        _open(2, "double", backend, ids=1)


@pytest.mark.parametrize("precision", ["double-single", "double"])
@pytest.mark.parametrize("order", [2, 4, 6, 8])
def test_parts_combined_by_the_reduce_kernel_and_large_batches(backend, monkeypatch,
                                                               order, precision):
    """As on a GPU: the j-range in several parts combined by the reduce kernel, which the
    engine queues after the force; batches of j-particles of any size stored by the
    engine. The float64 reference within tolerance, and the same bits as the parts
    combined on the host."""
    import sapporo.core.device

    system = _system(3000, seed=11)
    x, v, m, ids, a, jerk = system
    host = _open(order, precision, backend)  # the parts combined on the host (in C)
    monkeypatch.setattr(sapporo.core.device, "HOST_REDUCE_MAX", 0)
    monkeypatch.setattr(sapporo.core.device, "GPU_HOST_REDUCE_MAX", 0)
    lib = _open(order, precision, backend)
    try:
        for one in (lib, host):
            one._devs[0].ctx.small_pairs = 0  # no companion device: every launch in parts
        steps = _steps(lib, system, order, precision, [1, 7, 600, 1, 33],
                       np.random.default_rng(5))
        assert all(s[4] for s in steps), "a block not run by the engine"
        # every batch, the 600 records too
        assert all(s[3] for s in steps)
        (shape,) = lib._engine.shape(3000, 7, False)  # one device
        assert shape["reduce"] and shape["parts"] > 1  # the parts combined by the kernel
        # a run of consecutive addresses larger than one scatter (a tree code's list; on
        # device memory two copies from the mirror): stored by the engine
        run = np.arange(100, 900)
        xs = x.copy()
        xs[run] *= 1.01
        sel = np.arange(20, 40)
        extra = {"jerk": jerk[sel]} if order >= 8 else {}
        results = []
        for one in (lib, host):
            if one is host:  # its parts combined on the host, by the engine
                monkeypatch.undo()
            one.set_j_particles(np.arange(3000), ids, 0.0, m, x, v, a=a, jerk=jerk)
            one.compute(x[:1], v[:1], ids[:1], EPS2, a=a[:1] if order >= 6 else None,
                        jerk=jerk[:1] if order >= 8 else None)
            one.set_j_particles(run, ids[run], 0.0, m[run], xs[run], v[run], a=a[run],
                                jerk=jerk[run])
            np.testing.assert_array_equal(_device_records(one)[100:900],
                                          one._raw[100:900, : one._devs[0].raw_n])
            one.set_time(0.002)
            results.append(one.compute(x[sel], v[sel], ids[sel], EPS2,
                                       a=a[sel] if order >= 6 else None, **extra))
        shapes = [one._engine.shape(3000, 20, False)[0] for one in (lib, host)]
        assert shapes[0]["reduce"]
        if host._devs[0].h_raw is not None:  # host memory: the engine combines the parts
            assert not shapes[1]["reduce"] and shapes[1]["parts"] > 1
        _same(*results)  # the reduce kernel's order is the host's
        _near_reference((xs, v, m, ids, a, jerk), (sel, 0.002, results[0]), np.zeros(3000),
                        order, precision)
    finally:
        lib.close()
        host.close()


@pytest.mark.parametrize("precision", ["double-single", "double"])
@pytest.mark.parametrize("order", [2, 4, 6, 8])
def test_cuda_road_on_the_emulation(order, precision):
    """The engine's CUDA road (the driver API over the CPU emulation of tests/cudaemu):
    block steps stored, predicted, computed and combined by the reduce kernel in C through
    cuLaunchKernel and the asynchronous copies, with neighbour lists; every result within
    tolerance of the float64 reference and of OpenCL, and the same bits whatever the order
    in which the threads of a block run."""
    import cudaemu
    from cudaemu.fake_pycuda import emulated_cuda, scheduled

    system = _system(2500, seed=21)
    sizes = [3, 1, 40, 7]
    with emulated_cuda():
        driver = cudaemu.driver_library()
        if driver is None:
            pytest.skip("no C compiler for the emulated CUDA driver")
        lib = _open(order, precision, "cuda")
        try:
            if lib._devs[0].ctx.native_entry_points() is None:
                pytest.skip("a real CUDA driver is loaded: the emulated contexts are not its")
            launches = driver.cuemu_driver_calls(0)
            steps = _steps(lib, system, order, precision, sizes, np.random.default_rng(9),
                           h2=H2_LISTS)
            assert all(s[4] for s in steps), "a block not run by the engine"
            assert driver.cuemu_driver_calls(0) > launches + 2 * len(sizes)
            assert lib._engine.shape(2500, 7, False)[0]["reduce"]
        finally:
            lib.close()
        # the threads of every block run in other orders: the same bits (no result depends
        # on which thread writes or sums first)
        for schedule in (cudaemu.REVERSE, cudaemu.SHUFFLED):
            other = _open(order, precision, "cuda")
            try:
                with scheduled(schedule, 5):
                    again = _steps(other, system, order, precision, sizes,
                                   np.random.default_rng(9), h2=H2_LISTS)
            finally:
                other.close()
            for (_, _, res, *_), (_, _, want, *_) in zip(again, steps, strict=True):
                _same(res, want)
                for k in range(len(want.acc)):
                    np.testing.assert_array_equal(res.neighbours(k), want.neighbours(k))
    # the same steps through OpenCL
    cl = _open(order, precision, "opencl")
    try:
        cl_steps = _steps(cl, system, order, precision, sizes, np.random.default_rng(9),
                          h2=H2_LISTS)
    finally:
        cl.close()
    tol = 1e-4 if precision == "double-single" else 1e-10
    for (_, _, res, *_), (_, _, want, *_) in zip(steps, cl_steps, strict=True):
        for name in ("acc", "pot"):
            scale = np.abs(getattr(want, name)).max()
            assert np.abs(getattr(res, name) - getattr(want, name)).max() <= tol * scale


def test_a_batch_that_names_an_address_twice_keeps_its_last_record():
    """An address may stand several times in one store; its last record counts. The threads
    of one scatter launch write in no fixed order on a GPU, so the engine must not send an
    address twice in one batch: on the emulated CUDA, with the threads of each block run in
    reverse, the device keeps the last record and the forces follow it."""
    import cudaemu
    from cudaemu.fake_pycuda import emulated_cuda, scheduled

    x, v, m, ids, _, _ = _system(3000, seed=23)
    addr = np.array([7, 1000, 7, 2999, 1001, 7])
    xs = x[addr] + 0.01 * np.arange(1, 7)[:, None]
    want = x.copy()
    for k, q in enumerate(addr):  # the last record of each address
        want[q] = xs[k]
    with emulated_cuda():
        if cudaemu.driver_library() is None:
            pytest.skip("no C compiler for the emulated CUDA driver")
        lib = _open(4, "double", "cuda")
        try:
            if lib._devs[0].ctx.native_entry_points() is None:
                pytest.skip("a real CUDA driver is loaded: the emulated contexts are not its")
            lib.set_j_particles(np.arange(3000), ids, 0.0, m, x, v)
            lib.compute(x[:2], v[:2], ids[:2], EPS2)  # the plans made, the records stored
            with scheduled(cudaemu.REVERSE):
                # more than one batch, in no order, with repeats: the device as the mirror
                many = np.random.default_rng(4).integers(0, 3000, 700)
                lib.set_j_particles(many, ids[many], 0.0, m[many], x[::-1][many], v[many])
                lib.set_j_particles(many, ids[many], 0.0, m[many], x[many], v[many])
                raw_n = lib._devs[0].raw_n
                np.testing.assert_array_equal(_device_records(lib)[:3000],
                                              lib._raw[:3000, :raw_n])
                lib.set_j_particles(addr, ids[addr], 0.0, m[addr], xs, v[addr])
                res = lib.compute(x[:50], v[:50], ids[:50], EPS2)
            np.testing.assert_array_equal(_device_records(lib)[:3000], lib._raw[:3000, :raw_n])
            np.testing.assert_array_equal(lib._raw[addr, 0, :3], want[addr])
        finally:
            lib.close()
    r = ref.forces(x[:50], v[:50], ids[:50], want, v, m, ids, EPS2, order=4)
    for name in ("acc", "jerk", "pot"):
        got, exp = getattr(res, name), getattr(r, name)
        assert np.abs(got - exp).max() <= 1e-10 * np.abs(exp).max(), name


def _kernel_time_grows(lib, system, order: int, small: int, big: int) -> None:
    """A profiling library's kernel time: more than zero for every call, and more for a call
    of ``big`` i-particles than for one of ``small`` (the least of three each: a busy host
    only adds time; no figures asserted)."""
    x, v, m, ids, a, jerk = system
    times: dict[int, list[float]] = {small: [], big: []}
    for k in range(3):
        for ni in (small, big):
            lib.set_time(0.5 + 1e-3 * k)
            k0 = lib.kernel_seconds
            lib.compute(x[:ni], v[:ni], ids[:ni], EPS2, a=a[:ni] if order >= 6 else None,
                        jerk=jerk[:ni] if order >= 8 else None)
            times[ni].append(lib.kernel_seconds - k0)
    assert all(t > 0 for ts in times.values() for t in ts), times
    assert min(times[big]) > min(times[small]), times


def _same_steps(steps, other) -> None:
    for (*_, r1, _, _), (*_, r2, _, _) in zip(steps, other, strict=True):
        _same(r1, r2)


@pytest.mark.parametrize("precision", ["double-single", "double"])
@pytest.mark.parametrize("order", [2, 4, 6, 8])
def test_profiling_library_steps_run_in_c_and_are_timed(backend, order, precision):
    """A library opened with profiling runs its block steps in the engine (on host memory,
    and on device memory when tests/core/test_device_memory.py runs this file again with
    SAPPORO_NATIVE_MEMORY=device), with the bits of a library that does not profile, and
    the engine adds its kernels' device time to kernel_seconds: more than zero, and more
    for a call four times larger. One that does not profile has no timing in its plans and
    reads 0."""
    system = _system(2000, seed=13)
    prof = _open(order, precision, backend, profiling=True)
    plain = _open(order, precision, backend)
    try:
        assert prof.kernel_seconds == 0.0
        steps = _steps(prof, system, order, precision, [1, 3, 1, 40, 7],
                       np.random.default_rng(17))
        assert all(s[4] for s in steps), "a block not run by the engine"
        assert all(s[3] for s in steps[1:]), "a batch not stored by the engine"
        assert prof.kernel_seconds > 0.0
        _same_steps(steps, _steps(plain, system, order, precision, [1, 3, 1, 40, 7],
                                  np.random.default_rng(17)))
        assert _engine_used(plain) and plain.kernel_seconds == 0.0
        plan = prof._plans(False)[0]
        assert plan["seconds_at"] != 0 and plain._plans(False)[0]["seconds_at"] == 0
        if config.from_environment().native_memory == "device":
            assert plan["memory"] == 1  # the engine queued the copies and scatters
        # larger calls, in the engine too (a force launch each at least)
        launches = prof._engine.launches
        _kernel_time_grows(prof, system, order, 256, 1024)
        assert prof._engine.launches >= launches + 6
    finally:
        for lib in (prof, plain):
            lib.close()


@pytest.mark.parametrize("order", [4, 8])
def test_profiling_on_the_cuda_road(order):
    """The engine's CUDA road times its launches with events recorded around each on the
    stream (cuEventCreate, cuEventRecord, cuEventElapsedTime, cuEventDestroy_v2 of the
    emulated driver): the steps run in C with the bits of a library that does not profile,
    the time grows with the work, every event made is destroyed, and a library that does
    not profile makes none."""
    import cudaemu
    from cudaemu.fake_pycuda import emulated_cuda

    system = _system(1500, seed=23)
    with emulated_cuda():
        driver = cudaemu.driver_library()
        if driver is None:
            pytest.skip("no C compiler for the emulated CUDA driver")
        prof = _open(order, "double-single", "cuda", profiling=True)
        plain = _open(order, "double-single", "cuda")
        try:
            if prof._devs[0].ctx.native_entry_points() is None:
                pytest.skip("a real CUDA driver is loaded: the emulated contexts are not its")
            made, live = driver.cuemu_driver_calls(4), driver.cuemu_driver_calls(5)
            sizes = [3, 1, 20, 7]
            plain_steps = _steps(plain, system, order, "double-single", sizes,
                                 np.random.default_rng(3))
            assert _engine_used(plain) and plain.kernel_seconds == 0.0
            assert driver.cuemu_driver_calls(4) == made  # no events without profiling
            steps = _steps(prof, system, order, "double-single", sizes,
                           np.random.default_rng(3))
            assert all(s[4] for s in steps), "a block not run by the engine"
            _same_steps(steps, plain_steps)
            assert prof.kernel_seconds > 0.0
            # two events per launch: a prediction, a force and a reduce per step or so
            assert driver.cuemu_driver_calls(4) >= made + 2 * 2 * len(steps)
            _kernel_time_grows(prof, system, order, 16, 64)
            prof._engine.wait()
            assert driver.cuemu_driver_calls(5) == live  # every event destroyed
        finally:
            for lib in (prof, plain):
                lib.close()


@pytest.mark.parametrize("precision", ["double-single", "double"])
def test_neighbour_lists_and_the_asynchronous_pair_run_in_c(backend, precision):
    """compute with h2 and start_compute/result run in the engine: forces, nearest
    neighbours, neighbour lists and their exact counts against float64 distances, overflow
    past the capacity (8, so that some lists overflow); radii of zero give empty lists;
    j-particles stored between start and result count from the next call on."""
    n = 900
    x, v, m, ids, a, jerk = _system(n, seed=4)
    lib = _open(4, precision, backend, nb_capacity=8)
    rng = np.random.default_rng(2)
    near = 1e-6 if precision == "double-single" else 1e-12
    try:
        lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v)
        xj = x.copy()  # the stored positions
        overflowed = False
        for k, ni in enumerate([1, 5, 64, 3]):
            sel = np.sort(rng.choice(n, ni, replace=False))
            h2 = rng.uniform(0.0, 0.08, ni)
            h2[0] = 0.0  # no neighbours asked for this one
            t = 1e-3 * k
            lib.set_time(t)
            res = lib.compute(x[sel], v[sel], ids[sel], EPS2, h2=h2)
            pend = lib.start_compute(x[sel], v[sel], ids[sel], EPS2)
            assert lib._engine.ran and lib._pending is pend
            # stored while the call is in flight: for the next call, not this one
            xp = xj + v * t  # predicted (t_j = 0)
            xj[sel[:1]] += 0.01
            lib.set_j_particles(sel[:1], ids[sel[:1]], 0.0, m[sel[:1]], xj[sel[:1]],
                                v[sel[:1]])
            want = ref.forces(x[sel], v[sel], ids[sel], xp, v, m, ids, EPS2, order=4)
            tol = 1e-4 if precision == "double-single" else 1e-10
            for got in (res, pend.result()):
                assert np.abs(got.acc - want.acc).max() <= tol * np.abs(want.acc).max()
                assert np.abs(got.pot - want.pot).max() <= tol * np.abs(want.pot).max()
                np.testing.assert_array_equal(got.nn_index, want.nn_index)
            counts = res.neighbour_counts
            assert res.overflow == bool((counts > 8).any())
            overflowed |= res.overflow
            # the lists against float64 distances (every id when they fit; double-single
            # may differ near the radius), the counts exact
            for i in range(ni):
                r2 = ((xp - x[sel[i]]) ** 2).sum(axis=1)
                other = ids != ids[sel[i]]
                sure = set(ids[(r2 < h2[i] * (1 - near)) & other])
                maybe = set(ids[(r2 < h2[i] * (1 + near)) & other])
                assert len(sure) <= counts[i] <= len(maybe)
                got = set(res.neighbours(i).tolist())
                if counts[i] <= 8:
                    assert sure <= got <= maybe
                else:
                    assert len(got) == 8 and got <= maybe
        assert overflowed  # exact counts past the capacity were seen
        lib._engine.ran = False  # radii of zero: lists asked for, all empty, in C too
        got = lib.compute(x[:2], v[:2], ids[:2], EPS2, h2=np.zeros(2))
        assert lib._engine.ran
        assert got.neighbour_counts.tolist() == [0, 0]
        assert got.neighbours(1).size == 0 and not got.overflow
    finally:
        lib.close()


def test_inputs_of_other_forms_are_converted(backend):
    """Scalars, lists, int32 ids, Fortran-ordered arrays: the bits of the same values given
    as the engine takes them; j-particles at stored addresses, once Python has converted
    them, are stored by the engine (no new plan, nothing left for Python to upload)."""
    n = 300
    x, v, m, ids, a, jerk = _system(n)
    odd, plain = (_open(4, "double-single", backend) for _ in range(2))
    forms = [
        lambda s: (int(s[0]), int(ids[s][0]), 0.0, float(m[s][0]), x[s], v[s]),
        lambda s: (s.astype(np.int32), ids[s].astype(np.int32), np.zeros(len(s)), m[s],
                   x[s], v[s]),
        lambda s: (list(s), list(ids[s]), 0, m[s].tolist(), x[s].tolist(), v[s].tolist()),
        lambda s: (s, ids[s], 0.0, m[s], x[s], np.asfortranarray(v[s])),
    ]
    try:
        for lib in (odd, plain):
            lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v)
        for k, form in enumerate(forms * 2):
            sel = np.array([10 + k]) if k % 4 == 0 else np.arange(20 + k, 23 + k)
            gen = int(odd._lgen[0])
            odd.set_j_particles(*form(sel))
            if k:  # (the first call made the engine)
                assert int(odd._lgen[0]) == gen, k
            plain.set_j_particles(sel, ids[sel], np.zeros(len(sel)), m[sel], x[sel], v[sel])
            res = []
            for lib in (odd, plain):
                lib.set_time(1e-3 * k)
            xi = x[sel] if k % 2 else x[sel].T.copy().T  # a Fortran-ordered copy too
            res = [odd.compute(xi, v[sel].tolist(), ids[sel].astype(np.int32), EPS2),
                   plain.compute(x[sel], v[sel], ids[sel], EPS2)]
            _same(*res)
    finally:
        odd.close()
        plain.close()


def test_python_ints_where_numbers_go_run_in_c(backend):
    """t, mass and eps2 given as Python ints (eps2=0 is common) run in C, with the bits of
    the same values as floats; an int beyond int64 gets the library's error."""
    n = 100
    x, v, m, ids, a, jerk = _system(n)
    ints, floats = (_open(4, "double", backend) for _ in range(2))
    try:
        for lib, zero in ((ints, 0), (floats, 0.0)):
            lib.set_j_particles(np.arange(n), ids, zero, m, x, v)
            lib.compute(x[:1], v[:1], ids[:1], zero)
        res = []
        for lib, (zero, one) in ((ints, (0, 1)), (floats, (0.0, 1.0))):
            lib.set_j_particles(np.array([3]), ids[3:4], zero, one, x[3:4], v[3:4])
            lib.set_time(one)
            res.append(lib.compute(x[5:6], v[5:6], ids[5:6], zero))
        assert ints._engine.ran
        _same(*res)
        with pytest.raises(InputError):
            ints.set_j_particles(np.array([3]), ids[3:4], 10**400, 1, x[3:4], v[3:4])
    finally:
        ints.close()
        floats.close()


def _ready(order: int = 4, precision: str = "double-single", backend: str = "opencl"):
    """A library whose steps run in C, and its system."""
    n = 200
    x, v, m, ids, a, jerk = _system(n)
    lib = sapporo.Library(order=order, precision=precision, backend=backend)
    lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v)
    s = np.array([3])
    lib.compute(x[s], v[s], ids[s], EPS2)
    lib.set_j_particles(s, ids[s], 0.0, m[s], x[s], v[s])
    lib.compute(x[s], v[s], ids[s], EPS2)
    assert lib._engine.ran
    return lib, (x, v, m, ids, a, jerk)


@pytest.mark.parametrize("case", [
    "x_nan", "x_huge", "v_inf", "eps2_negative", "id_negative", "id_huge", "a_nan_order4",
])
def test_bad_i_input_gets_the_python_error(backend, case):
    lib, (x, v, m, ids, a, jerk) = _ready(backend=backend)
    s = np.array([4])
    xi, vi, idi, eps2, ai = x[s].copy(), v[s].copy(), ids[s].copy(), EPS2, None
    if case == "x_nan":
        xi[0, 1] = np.nan
    elif case == "x_huge":
        xi[0, 0] = 1e200
    elif case == "v_inf":
        vi[0, 2] = np.inf
    elif case == "eps2_negative":
        eps2 = -1.0
    elif case == "id_negative":
        idi[0] = -1
    elif case == "id_huge":
        idi[0] = 2**40
    elif case == "a_nan_order4":
        ai = np.full((1, 3), np.nan)
    try:
        with pytest.raises(InputError):
            lib.compute(xi, vi, idi, eps2, a=ai)
        # and the library goes on, in C again
        r = lib.compute(x[s], v[s], ids[s], EPS2)
        assert np.isfinite(r.acc).all()
    finally:
        lib.close()


@pytest.mark.parametrize("case", ["x_nan", "t_inf", "mass_tiny", "pop_at_order4", "id_huge",
                                  "address_negative"])
def test_bad_j_input_gets_the_python_error(backend, case):
    lib, (x, v, m, ids, a, jerk) = _ready(backend=backend)
    s = np.array([5])
    args = dict(address=s, index=ids[s], t=0.0, mass=m[s].copy(), x=x[s].copy(), v=v[s])
    if case == "x_nan":
        args["x"][0, 0] = np.nan
    elif case == "t_inf":
        args["t"] = np.inf
    elif case == "mass_tiny":
        args["mass"][0] = 1e-40
    elif case == "pop_at_order4":
        args["pop"] = np.zeros((1, 3))
    elif case == "id_huge":
        args["index"] = np.array([2**31])
    elif case == "address_negative":
        args["address"] = np.array([-2])
    try:
        with pytest.raises(InputError):
            lib.set_j_particles(**args)
        np.testing.assert_array_equal(lib._raw[5], _device_records(lib)[5])  # nothing stored
    finally:
        lib.close()


def test_non_finite_force_is_diagnosed(backend):
    """Two particles at the same place with eps2 = 0: the Python way names the particle."""
    lib, (x, v, m, ids, a, jerk) = _ready(backend=backend)
    try:
        s = np.array([7])
        lib.set_j_particles(s, ids[s], 0.0, m[s], x[8:9], v[s])  # on top of particle 8
        with pytest.raises(NonFiniteError, match="non-finite force"):
            lib.compute(x[8:9], v[8:9], ids[8:9], 0.0)
    finally:
        lib.close()


def test_state_changes_make_new_plans(backend):
    """More addresses, higher derivatives, a reset, a pending result, a launch table, lists
    and subsets between steps: every result that of the state the test keeps itself, by the
    float64 reference (double precision)."""
    n = 400
    x, v, m, ids, a, jerk = _system(n)
    lib = _open(4, "double", backend)
    # the j-memory as the test keeps it: per address position, velocity, a, jerk, time, id
    mem = {"x": np.zeros((n, 3)), "v": np.zeros((n, 3)), "a": np.zeros((n, 3)),
           "jerk": np.zeros((n, 3)), "t": np.zeros(n), "m": np.zeros(n),
           "id": np.full(n, -1)}

    def store(sel, t, **kw):
        lib.set_j_particles(sel, ids[sel], t, m[sel], x[sel], v[sel], **kw)
        for key, val in (("x", x[sel]), ("v", v[sel]), ("m", m[sel]), ("id", ids[sel])):
            mem[key][sel] = val
        mem["t"][sel] = t
        for key in ("a", "jerk"):
            mem[key][sel] = kw.get(key, np.zeros((len(sel), 3)))

    def expected(sel, t, nj=None, h2=None):
        used = np.flatnonzero(mem["id"] >= 0)
        used = used[used < (nj if nj is not None else n)]
        xp, vp, _ = ref.predict(t, mem["t"][used], mem["x"][used], mem["v"][used],
                                mem["a"][used], mem["jerk"][used])
        return ref.forces(x[sel], v[sel], ids[sel], xp, vp, mem["m"][used], mem["id"][used],
                          EPS2, order=4, h2=h2)

    def near(got, want):
        for name in ("acc", "jerk", "pot"):
            g, w = getattr(got, name), getattr(want, name)
            assert np.abs(g - w).max() <= 1e-10 * np.abs(w).max(), name
        np.testing.assert_array_equal(got.nn_index, want.nn_index)

    def step(sel, t, **kw):
        store(sel, t, **kw)
        lib.set_time(t + 1e-3)
        near(lib.compute(x[sel], v[sel], ids[sel], EPS2), expected(sel, t + 1e-3))

    try:
        store(np.arange(300), 0.0)
        step(np.array([1]), 0.0)
        step(np.array([2, 9]), 0.0)
        step(np.array([350]), 0.01)                 # a new address: n_stored grows
        step(np.array([3]), 0.02, a=a[3:4])          # the predictor reads a from now on
        step(np.array([4]), 0.03, a=a[4:5], jerk=jerk[4:5])
        step(np.array([5]), 0.04)
        pend = lib.start_compute(x[6:7], v[6:7], ids[6:7], EPS2)
        want = expected(np.array([6]), 0.041)
        step(np.array([6]), 0.05)                    # while a result is pending
        near(pend.result(), want)
        lib._engine.ran = False
        got = lib.compute(x[:3], v[:3], ids[:3], EPS2, h2=0.05)
        want = expected(np.arange(3), 0.051, h2=0.05)
        near(got, want)
        for i in range(3):
            np.testing.assert_array_equal(got.neighbours(i), want.neighbours[i])
        near(lib.compute(x[:3], v[:3], ids[:3], EPS2, nj=100),
             expected(np.arange(3), 0.051, nj=100))
        assert lib._engine.ran  # lists and a subset of the addresses run in C too
        step(np.array([7]), 0.06)
        lib.set_launch_table(lib.launch_tables()[0])
        step(np.array([8]), 0.07)
        lib.reset()
        for key in mem:
            mem[key][:] = -1 if key == "id" else 0
        store(np.arange(50), 0.0)
        step(np.array([9]), 0.08)
        step(np.array([10]), 0.09)
        assert _engine_used(lib)
    finally:
        lib.close()


def test_built_with_the_package():
    """The engine is compiled when the package is installed, never at run time: it lies in
    the package's own folder."""
    mod = engine.load()
    assert Path(mod.__file__).parent == Path(engine.__file__).parent
    assert engine.status().startswith("native (")


def test_a_missing_engine_is_said(backend, monkeypatch):
    """Without the compiled module (an install whose C compiler failed) there is nothing to
    compute with: a library says so at its first call, naming the fix, and `sapporo info`
    shows the same line."""
    import sys

    import sapporo.core
    from sapporo.errors import BackendError

    monkeypatch.setattr(engine, "_STATE", {})
    monkeypatch.setitem(sys.modules, "sapporo.core._engine", None)  # import fails
    monkeypatch.delattr(sapporo.core, "_engine", raising=False)
    assert "reinstall sapporo-nbody with a C compiler" in engine.status()
    x, v, m, ids, _, _ = _system(20)
    with sapporo.Library(order=4, backend=backend) as lib:
        with pytest.raises(BackendError, match="native engine .* cannot be imported"):
            lib.set_j_particles(np.arange(20), ids, 0.0, m, x, v)
        with pytest.raises(BackendError, match="native engine .* cannot be imported"):
            lib.compute(x[:2], v[:2], ids[:2], EPS2)


def test_plan_table_written_once(backend):
    """plan.h is the one definition of a plan's words: the plan the library makes has a
    value for every DP_* word of it (no more, no fewer), and its entry points are the
    DP_FN_* words of one runtime (OpenCL's, or CUDA's DP_FN_CU_*)."""
    lib = sapporo.Library(order=4, precision="double-single", backend=backend)
    try:
        x, v, m, ids, _, _ = _system(64)
        lib.set_j_particles(np.arange(64), ids, 0.0, m, x, v)
        plans = lib._plans(False)
        # one per entry of the launch table, and per companion of small launches
        ranges = lib._devs[0]._ranges()
        assert len(plans) == len(ranges) * (2 if lib._devs[0].ctx.small_pairs > 0 else 1)
        assert {(p["ni_lo"], p["ni_hi"]) for p in plans} == {r[1:] for r in ranges}
        plan = plans[0]
        keys = set(engine.plan_keys())
        extra = {"launches", "call_args", "ni_args", "entry"}
        assert set(plan) - extra == keys
        fns = {n[6:].lower() for n in engine.plan_enums() if n.startswith("DP_FN_")}
        runtimes = ({f for f in fns if not f.startswith("cu_")},
                    {f for f in fns if f.startswith("cu_")})
        assert set(plan["entry"]) in runtimes
        words = engine.plan_words(plan)
        assert words.size == engine.plan_enums()["DP_WORDS"] and words[0] == 1
        # the arguments the engine sets per call by position (FA_*, RA_*, PA_*): the
        # kernels' parameter tables agree in every variant
        from sapporo.core import layout

        e = engine.plan_enums()
        for order in (2, 4, 6, 8):
            for ds in (False, True):
                for ngb in (False, True):
                    force = layout.arg_names(layout.FORCE_ARGS, order, ds, ngb)
                    assert [force.index(n) for n in ("nj", "ni", "ni_pad", "jchunk")] == [
                        e["FA_NJ"], e["FA_NI"], e["FA_NI_PAD"], e["FA_JCHUNK"]]
                reduce = layout.arg_names(layout.REDUCE_ARGS, order, ds)
                assert [reduce.index(n) for n in ("ni", "ni_pad", "nparts")] == [
                    e["RA_NI"], e["RA_NI_PAD"], e["RA_NPARTS"]]
                assert layout.arg_names(layout.PREDICT_ARGS, order, ds).index("n") == e["PA_N"]
    finally:
        lib.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_module_refuses_misuse():
    """The module's own guards: an Engine without memory, a short result buffer, a planner
    that is not callable or that fails, a plan table of the wrong size; errors, never a
    crash."""
    mod = engine.load()
    bare = mod.Engine.__new__(mod.Engine)
    for call in (lambda: bare.compute(np.zeros((1, 3)), np.zeros((1, 3)), 0, 0.0, None, None,
                                      1, None),
                 lambda: bare.start(np.zeros((1, 3)), np.zeros((1, 3)), 0, 0.0, None, None,
                                    1, None),
                 lambda: bare.set_time(0.0),
                 lambda: bare.finish(1), lambda: bare.handle,
                 lambda: bare.lists(np.zeros(1, np.int64), np.zeros((1, 1), np.int32)),
                 lambda: bare.put_j(0, 0, 0.0, 1.0, np.zeros((1, 3)), np.zeros((1, 3)),
                                    None, None, None, None, None, None),
                 bare.wait, bare.disable):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()
    out = np.zeros(mod.NCO_MAX * mod.NI_MAX)
    with pytest.raises(ValueError, match="writable float64"):
        mod.Engine(np.zeros(10), lambda *a: 0)
    with pytest.raises((ValueError, TypeError)):
        mod.Engine(np.zeros(mod.NCO_MAX * mod.NI_MAX, dtype=np.float32), lambda *a: 0)
    with pytest.raises(TypeError, match="planner"):
        mod.Engine(out, None)
    args = (np.zeros((1, 3)), np.zeros((1, 3)), 0, 0.0, None, None)
    # no plan: nothing stored, nothing computed; a planner that has none turns it off
    asked = []
    eng = mod.Engine(out, lambda *a: asked.append(a) or -1)
    with pytest.raises(TypeError):
        eng.compute(1, 2)
    with pytest.raises(mod.Error, match="no plan"):
        eng.put_j(0, 0, 0.0, 1.0, np.zeros((1, 3)), np.zeros((1, 3)), None, None, None, None,
                  None, None)
    assert asked == [(0, 1, 0)] and eng.off == 1 and eng.planner_calls == 1
    for call in (eng.compute, eng.start):
        with pytest.raises(mod.Error, match="failed earlier"):
            call(*args, 5, None)
    assert len(asked) == 1  # never asked again
    with pytest.raises(RuntimeError, match="no force call"):
        eng.finish(1)  # nothing started
    counts, table = np.ones(2, np.int64), np.zeros((2, 3), np.int32)
    assert eng.lists(counts, table) is False  # no lists: none found, every entry -1
    assert not counts.any() and (table == -1).all()
    for bad in ((np.zeros(2), table), (counts, np.zeros((2, 3))),
                (counts, np.zeros((3, 3), np.int32)), (counts, np.zeros((2, 0), np.int32))):
        with pytest.raises(ValueError, match="lists"):
            eng.lists(*bad)
    # initialised once: its plans and rows stay as they are (a second __init__ with a
    # rejected buffer left it writing there)
    for bad in (np.zeros(3), out):
        with pytest.raises(RuntimeError, match="initialised once"):
            eng.__init__(bad, lambda *a: 0)
    # plans it cannot read, and a planner that raises: an error, and no call from then on
    garbage = engine.plan_words(0)
    garbage[0] = 1  # "usable", and nothing else
    for planner, why in ((lambda *a: np.zeros(3, dtype=np.int64), "plans of 24 bytes"),
                         (lambda *a: 1 / 0, "could not make a plan"),
                         (lambda *a: -1, "no plan"),
                         (lambda *a: garbage, "does not understand"),
                         (lambda *a: np.zeros(0, dtype=np.int64), "plans of 0 bytes")):
        eng = mod.Engine(out, planner)
        with pytest.raises(RuntimeError, match=why):
            eng.compute(*args, 5, None)
        assert eng.off == 1
        with pytest.raises(mod.Error, match="failed earlier"):
            eng.compute(*args, 5, None)
    # a device count it does not serve
    for ndev in (0, -1, mod.MAX_DEV + 1):
        with pytest.raises(ValueError, match="ndev"):
            mod.Engine(out, lambda *a: 0, ndev)


def test_host_out_of_memory_is_a_backend_error(backend):
    """The engine's own buffers out of host memory (a large batch of j-particles, a call):
    a BackendError naming the device, never a bare MemoryError; the library computes
    afterwards."""
    from sapporo.errors import BackendError

    lib, (x, v, m, ids, a, jerk) = _ready(backend=backend)
    real = lib._engine

    class Starved:
        def __getattr__(self, name):
            return getattr(real, name)

        def put_j(self, *args):
            raise MemoryError

    try:
        lib._engine = Starved()
        with pytest.raises(BackendError, match="no memory"):
            lib.set_j_particles(np.arange(5), ids[:5], 0.0, m[:5], x[:5], v[:5])
        lib._engine = real
        s = np.array([3])
        res = lib.compute(x[s], v[s], ids[s], EPS2)
        assert np.isfinite(res.acc).all()
    finally:
        lib.close()


def test_launch_failure_is_a_backend_error_that_stays(backend):
    """An OpenCL error inside the native engine raises BackendError naming the device; the
    library then refuses every force call with a BackendError that says so (its device
    state is unknown), and closes cleanly."""
    from sapporo.errors import BackendError

    lib, (x, v, m, ids, a, jerk) = _ready(backend=backend)
    real = lib._engine

    class Failing:
        def __getattr__(self, name):
            return getattr(real, name)

        def compute(self, *args):
            real.compute(*args)  # it ran (arguments set, maybe predicted) and then failed
            raise RuntimeError("OpenCL error -5 in a block step (status 0)")

    try:
        lib._engine = Failing()
        lib.set_time(0.5)
        with pytest.raises(BackendError, match="OpenCL error -5"):
            lib.compute(x[9:10], v[9:10], ids[9:10], EPS2)
        assert lib._engine is None
        with pytest.raises(BackendError, match="failed earlier"):
            lib.compute(x[9:11], v[9:11], ids[9:11], EPS2)
        with pytest.raises(BackendError, match="failed earlier"):
            lib.start_compute(x[9:11], v[9:11], ids[9:11], EPS2)
    finally:
        lib.close()
    # a store that fails in the engine (a copy to the device): the same
    lib, (x, v, m, ids, a, jerk) = _ready(backend=backend)
    real = lib._engine

    class FailingStore(Failing):
        def put_j(self, *args):
            if isinstance(args[0], list):
                return False  # not as given: Python converts it and hands it over again
            raise RuntimeError("OpenCL error -5 copying a run of j-records (status 0)")

    try:
        lib._engine = FailingStore()
        for addr in ([3], np.array([3])):  # converted by Python, and as given
            lib._engine = lib._engine or FailingStore()
            with pytest.raises(BackendError, match="copying a run of j-records"):
                lib.set_j_particles(addr, ids[3:4], 0.0, m[3:4], x[3:4], v[3:4])
            assert lib._engine is None
        with pytest.raises(BackendError, match="failed earlier"):
            lib.compute(x[9:11], v[9:11], ids[9:11], EPS2)
    finally:
        lib.close()


#: the entry points of the emulated driver that the next test makes fail, and whether the
#: library profiles (the engine calls the events' entry points only then)
_CUDA_FAILURES = [("cuLaunchKernel", False), ("cuMemcpyHtoDAsync_v2", False),
                  ("cuMemcpyDtoHAsync_v2", False), ("cuStreamSynchronize", False),
                  ("cuCtxPushCurrent_v2", False), ("cuEventCreate", True),
                  ("cuEventRecord", True), ("cuEventElapsedTime", True)]


@pytest.mark.parametrize(("entry", "profiling"), _CUDA_FAILURES)
def test_a_cuda_error_in_the_engine_fails_the_step_and_nothing_else(entry, profiling):
    """The engine's CUDA error paths, on the emulation (cuemu_fail of tests/cudaemu's driver):
    an entry point that fails at any one of its calls in a block step (the stores of one
    record, of a batch and of a run, the prediction, the force, the reduce, the copies of
    the i-particles, the results and the lists, the waits) makes the step raise a
    BackendError naming the device and the error's code; no context is left current
    (PyCUDA's nor the engine's), no event undestroyed; the library refuses every later force
    call and closes; and the next library of the process computes as before."""
    import ctypes
    import re

    import cudaemu
    from cudaemu.fake_pycuda import emulated_cuda

    from sapporo.errors import BackendError

    code = 700  # CUDA_ERROR_ILLEGAL_ADDRESS, as a kernel's bad access gives it
    system = _system(2500, seed=29)  # (the j-range in parts: the reduce kernel runs too)
    x, v, m, ids, a, jerk = system
    sel = np.sort(np.random.default_rng(2).choice(2500, 10, replace=False))
    one, run = np.array([7]), np.arange(100, 900)
    h2 = np.full(len(sel), H2_LISTS)
    with emulated_cuda():
        driver = cudaemu.driver_library()
        if driver is None:
            pytest.skip("no C compiler for the emulated CUDA driver")
        driver.cuemu_fail.restype = ctypes.c_long
        driver.cuemu_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]

        def current() -> int | None:
            ctx = ctypes.c_void_p()
            assert driver.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
            return ctx.value

        def ready() -> tuple[sapporo.Library, np.ndarray]:
            """A new library after three steps in C (each near the reference), and the
            times of its j-particles."""
            lib = _open(4, "double", "cuda", profiling=profiling)
            if lib._devs[0].ctx.native_entry_points() is None:
                lib.close()
                pytest.skip("a real CUDA driver is loaded: the emulated contexts are not its")
            steps = _steps(lib, system, 4, "double", [3, 10, 1], np.random.default_rng(9),
                           h2=H2_LISTS)
            assert all(s[4] for s in steps), "a block not run by the engine"
            tj = np.zeros(2500)
            for s_sel, t, *_ in steps:
                tj[s_sel] = t - 1e-3
            return lib, tj

        def step(lib) -> sapporo.ForceResult:
            """The next step: one j-particle stored, ten, and a run of 800 (each copied to
            the device its own way), and the forces on ten with neighbour lists (shapes
            planned before: the engine calls no planner, and PyCUDA pushes no context)."""
            for s in (one, sel, run):
                lib.set_j_particles(s, ids[s], 0.003, m[s], x[s], v[s], a=a[s], jerk=jerk[s])
            lib.set_time(0.004)
            return lib.compute(x[sel], v[sel], ids[sel], EPS2, h2=h2)

        assert current() is None
        # the entry point's calls in the step (counted by a failure that never comes)
        lib, tj = ready()
        try:
            pushes = lib._devs[0].ctx.drv.state["calls"]["push"]
            driver.cuemu_fail(entry.encode(), 10**6, code)
            try:
                res = step(lib)
            finally:
                calls = 10**6 - driver.cuemu_fail(None, 0, 0)
            assert lib._devs[0].ctx.drv.state["calls"]["push"] == pushes  # all the engine's
            tj[np.concatenate([one, sel, run])] = 0.003
            _near_reference(system, (sel, 0.004, res), tj, 4, "double", h2=H2_LISTS)
            assert lib._engine.shape(2500, len(sel), True)[0]["reduce"]
        finally:
            lib.close()
        assert calls >= (4 if entry == "cuLaunchKernel" else 1), calls
        for k in range(calls):  # the k-th call fails
            lib, _ = ready()  # (the library before it, and its failure, spoilt nothing)
            name = re.escape(lib.device_name)
            events = driver.cuemu_driver_calls(5)
            driver.cuemu_fail(entry.encode(), k, code)
            try:
                with pytest.raises(BackendError, match=f"^{name}: CUDA error {code} "):
                    step(lib)
                assert driver.cuemu_fail(None, 0, 0) == -1  # it did fail
                assert lib._engine is None
                assert lib._devs[0].ctx.drv.state["depth"] == 0 and current() is None, k
                for again in (lib.compute, lib.start_compute):
                    with pytest.raises(BackendError, match=f"^{name}: .*failed earlier"):
                        again(x[sel], v[sel], ids[sel], EPS2)
            finally:
                driver.cuemu_fail(None, 0, 0)
                lib.close()
            assert driver.cuemu_driver_calls(5) == events, k  # every event destroyed
        # a library opened after the failures: as before
        lib, tj = ready()
        try:
            res = step(lib)
        finally:
            lib.close()
        tj[np.concatenate([one, sel, run])] = 0.003
        _near_reference(system, (sel, 0.004, res), tj, 4, "double", h2=H2_LISTS)
        assert current() is None


def test_install_without_a_compiler_says_what_to_install(tmp_path):
    """The package build compiles the engine; without a C compiler it stops with a message
    that names what to install (setup.py), not a bare compiler error."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib",
                           str(tmp_path / "lib"), "--build-temp", str(tmp_path / "tmp")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "needs a C compiler and Python's development headers" in proc.stderr
    assert "apt install gcc python3-dev" in proc.stderr


def test_a_library_dropped_without_close_is_freed(backend):
    """The engine calls back into its library for plans, but does not keep it alive: a
    library that goes out of scope unclosed is freed (its device memory with it)."""
    import gc
    import weakref

    lib, _ = _ready(backend=backend)
    ref = weakref.ref(lib)
    del lib
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("precision", ["double-single", "double"])
def test_any_shape_without_the_planner(backend, precision):
    """Force calls whose ni and nj change every call, with lists and without: the engine
    asks the library for plans once per kind (lists or not), shapes every call itself, and
    every result matches the float64 reference; stores beyond the addresses in use, within
    the memory held, are the engine's too (no new plan)."""
    order, n = 4, 3000
    x, v, m, ids, a, jerk = system = _system(n, seed=71)
    rng = np.random.default_rng(72)
    lib = _open(order, precision, backend)
    try:
        lib.set_j_particles(np.arange(1000), ids[:1000], 0.0, m[:1000], x[:1000], v[:1000])
        lib.compute(x[:3], v[:3], ids[:3], EPS2)
        eng = lib._engine
        assert eng.planner_calls == 1
        # the other addresses, stored by the engine: the memory holds them already
        lib.set_j_particles(np.arange(1000, n), ids[1000:], 0.0, m[1000:], x[1000:],
                            v[1000:])
        assert lib.n_stored == n
        shapes = set()
        for k in range(40):
            ni, nj = int(rng.integers(1, 600)), int(rng.integers(1, n + 1))
            sel = rng.choice(n, ni, replace=False)
            lists = k % 4 == 3
            res = lib.compute(x[sel], v[sel], ids[sel], EPS2, nj=nj,
                              h2=H2_LISTS if lists else None)
            shapes.add((ni, nj))
            keep = np.arange(nj)
            want = ref.forces(x[sel], v[sel], ids[sel], x[keep], v[keep], m[keep], ids[keep],
                              EPS2, order=order, h2=np.full(ni, H2_LISTS) if lists else None)
            tol = 1e-4 if precision == "double-single" else 1e-10
            for got, exp in ((res.acc, want.acc), (res.jerk, want.jerk), (res.pot, want.pot)):
                assert np.abs(got - exp).max() <= tol * np.abs(exp).max(), (ni, nj)
            if lists and precision == "double":
                for i in range(ni):
                    np.testing.assert_array_equal(res.neighbours(i), want.neighbours[i])
        assert len(shapes) == 40
        assert eng.planner_calls == 2  # once without lists, once with
        _near_reference(system, (np.arange(5), 0.0, lib.compute(x[:5], v[:5], ids[:5], EPS2)),
                        np.zeros(n), order, precision)
    finally:
        lib.close()


@pytest.mark.parametrize("precision", ["double-single", "double"])
def test_still_records_launch_no_prediction(backend, precision):
    """Order 2 with no velocity stored (the GRAPE-5 calls' j-particles) on host memory: the
    engine writes the predicted positions as it stores the records and launches the force
    alone, with the same bits as the prediction kernel's; one velocity stored, and the
    prediction runs again on every change, over the records stored still too."""
    n = 500
    x, _, m = ref.plummer(n, seed=3)
    ids, zero = np.arange(n), np.zeros((n, 3))
    still, moving = (_open(2, precision, backend) for _ in range(2))
    try:
        moving.set_j_particles([0], [0], 0.0, [m[0]], x[:1], np.ones((1, 3)))
        counts = []
        out = {}
        for lib in (still, moving):
            lib.set_j_particles(ids, ids, 0.0, m, x, zero)
            lib.set_time(0.5)
            lib.compute(x[:37], zero[:37], ids[:37], 1e-4)  # (the first prediction)
            before = lib._engine.launches
            x2 = x.copy()
            for k in range(3):
                x2[:100] += 0.01
                lib.set_j_particles(ids[:100], ids[:100], 0.0, m[:100], x2[:100], zero[:100])
                lib.set_time(0.5 + k)
                out.setdefault(id(lib), []).append(lib.compute(x[:37], zero[:37], ids[:37], 1e-4))
            counts.append(lib._engine.launches - before)
        host = still._devs[0].h_raw is not None
        # host memory: the force alone, against prediction and force (device memory: a
        # scatter of the records too, and a prediction for both)
        assert counts == ([3, 6] if host else [counts[1]] * 2)
        for a, b in zip(out[id(still)], out[id(moving)], strict=True):
            assert np.array_equal(a.acc, b.acc) and np.array_equal(a.pot, b.pot)
        r = ref.forces(x[:37], None, ids[:37], x2, None, m, ids, 1e-4, order=2)
        tol = 1e-5 if precision == "double-single" else 1e-12
        assert ref.relative_vector_error(a.acc, r.acc, r.acc_abs).max() <= tol
        # one velocity now: every record is predicted again, from the records stored still
        still.set_j_particles([n - 1], [n - 1], 0.0, [m[-1]], x2[-1:], np.ones((1, 3)))
        still.set_time(3.0)
        got = still.compute(x[:37], zero[:37], ids[:37], 1e-4)
        x2[-1] += 3.0
        r = ref.forces(x[:37], None, ids[:37], x2, None, m, ids, 1e-4, order=2)
        assert ref.relative_vector_error(got.acc, r.acc, r.acc_abs).max() <= tol
    finally:
        still.close()
        moving.close()


def test_a_block_step_makes_few_python_calls(backend):
    """A Python API block step (store the corrected block, move the time on, the forces on
    the next block) makes at most 15 Python function calls, with neighbour lists or not,
    synchronous or not: the engine does the rest."""
    import sys

    n, k = 1024, 16
    x, v, m, ids, a, jerk = _system(n)
    with _open(4, "double-single", backend) as lib:
        lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v, a=a, jerk=jerk)
        act = np.arange(k)
        h2 = np.full(k, 0.01)

        def step(kind: str) -> None:
            lib.set_j_particles(act, ids[act], 0.0, m[act], x[act], v[act], a=a[act],
                                jerk=jerk[act])
            lib.set_time(0.01)
            if kind == "async":
                lib.start_compute(x[act], v[act], ids[act], 1e-4).result()
            else:
                lib.compute(x[act], v[act], ids[act], 1e-4, h2=h2 if kind == "lists" else None)

        for kind in ("plain", "lists", "async"):
            step(kind)  # (plans made)
            calls: list[str] = []

            def count(frame, event, _, calls=calls) -> None:
                if event == "call":
                    calls.append(frame.f_code.co_name)

            sys.setprofile(count)
            try:
                step(kind)
            finally:
                sys.setprofile(None)
            calls = calls[1:]  # step itself
            assert 0 < len(calls) <= 15, (kind, calls)
