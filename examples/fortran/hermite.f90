! hermite.f90 -- a 4th-order Hermite N-body integrator with block time steps, in Fortran, on
! sapporo's GRAPE-6 interface through the explicit interfaces of module sapporo_g6.
!
! Build and run (the flags point at the library `sapporo capi` builds for this Python
! environment; the first call builds it):
!
!     gfortran -O2 -c sapporo_g6.f90
!     gfortran -O2 -o hermite hermite.f90 sapporo_g6.o $(sapporo capi flags)
!     ./hermite [N [T_END [ETA [EPS2]]]]        defaults: 1024 1 0.02 1e-4
!
! or `make` with the Makefile next to this file.  It makes a Plummer sphere in Henon units,
! integrates it to T_END (rounded up to a multiple of 1/16) and prints the energy at both
! ends and the relative error.  Exit status 0, or 1 after a library error.
program hermite
  use, intrinsic :: iso_c_binding, only: c_int, c_double
  use sapporo_g6
  implicit none
  integer, parameter :: dp = c_double
  real(dp), parameter :: dt_max = 1.0_dp / 16, dt_min = 1.0_dp / 2.0_dp**30
  real(dp), parameter :: pi = 3.14159265358979323846_dp
  integer(c_int), parameter :: cid = 0
  integer(c_int) :: n, npipes, na, i, q, k
  real(dp) :: eps2, eta, t_end, time, tnext, h, e0, e1, da, a1, j1, s1, c1
  real(dp) :: s(3), c(3)
  real(dp), allocatable :: m(:), t(:), dt(:), pot(:), x(:, :), v(:, :), a(:, :), jk(:, :)
  real(dp), allocatable :: xp(:, :), vp(:, :), an(:, :), jn(:, :)
  integer(c_int), allocatable :: active(:), all(:)
  integer(kind=8) :: steps, blocks, count0, count1, rate
  character(len=64) :: arg
  character(len=32) :: version

  n = 1024
  t_end = 1
  eta = 0.02_dp
  eps2 = 1e-4_dp
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) t_end
  end if
  if (command_argument_count() >= 3) then
    call get_command_argument(3, arg)
    read (arg, *) eta
  end if
  if (command_argument_count() >= 4) then
    call get_command_argument(4, arg)
    read (arg, *) eps2
  end if
  if (n < 2 .or. t_end <= 0 .or. eta <= 0 .or. eps2 < 0) then
    write (0, '(a)') 'usage: hermite [N >= 2 [T_END > 0 [ETA > 0 [EPS2 >= 0]]]]'
    error stop 2
  end if
  t_end = ceiling(t_end / dt_max) * dt_max
  allocate (m(n), t(n), dt(n), pot(n), x(3, n), v(3, n), a(3, n), jk(3, n))
  allocate (xp(3, n), vp(3, n), an(3, n), jn(3, n), active(n), all(n))
  t = 0
  dt = 0
  a = 0
  jk = 0
  all = [(i, i = 0, n - 1)]
  call plummer()

  call check(g6_open(cid), 'g6_open')
  npipes = g6_npipes()
  if (n > g6_get_nj_max()) then
    write (0, '(a, i0, a, i0, a)') 'hermite: N = ', n, ' is more than the device holds (', &
      g6_get_nj_max(), ')'
    error stop 1
  end if
  call sapporo_version_string(version)
  write (*, '(a, a, a, i0, a, f0.4, a, f0.4, a, es9.2, a, i0, a)') 'sapporo ', trim(version), &
    ', N = ', n, ', t_end = ', t_end, ', eta = ', eta, ', eps2 = ', eps2, ', ', npipes, &
    ' i-particles per call'

  ! First forces: every particle stored with zero derivatives at t = 0.
  do i = 1, n
    call send_j(i)
  end do
  call forces(0.0_dp, n, all, x, v, a, jk, pot)
  do i = 1, n
    dt(i) = block_step(0.01_dp * norm2(a(:, i)) / norm2(jk(:, i)), dt_max, 0.0_dp)
    call send_j(i)            ! again, now with acceleration and jerk
  end do
  e0 = energy(0.0_dp)

  call system_clock(count0, rate)
  steps = 0
  blocks = 0
  time = 0
  do while (time < t_end)
    tnext = minval(t + dt)
    na = 0
    do i = 1, n
      if (t(i) + dt(i) == tnext) then
        na = na + 1
        active(na) = i - 1
      end if
    end do
    time = tnext
    do q = 1, na                                   ! predict
      i = active(q) + 1
      h = time - t(i)
      xp(:, i) = x(:, i) + h * (v(:, i) + h * (a(:, i) / 2 + h * jk(:, i) / 6))
      vp(:, i) = v(:, i) + h * (a(:, i) + h * jk(:, i) / 2)
    end do
    call forces(time, na, active, xp, vp, an, jn, pot)
    do q = 1, na                                   ! correct, next step, store
      i = active(q) + 1
      h = time - t(i)
      do k = 1, 3
        da = a(k, i) - an(k, q)
        s(k) = (-6 * da - h * (4 * jk(k, i) + 2 * jn(k, q))) / h**2
        c(k) = (12 * da + 6 * h * (jk(k, i) + jn(k, q))) / h**3
        x(k, i) = xp(k, i) + h**4 * (s(k) / 24 + h * c(k) / 120)
        v(k, i) = vp(k, i) + h**3 * (s(k) / 6 + h * c(k) / 24)
        s(k) = s(k) + h * c(k)                     ! snap at the end of the step
      end do
      a(:, i) = an(:, q)
      jk(:, i) = jn(:, q)
      a1 = norm2(a(:, i))
      j1 = norm2(jk(:, i))
      s1 = norm2(s)
      c1 = norm2(c)
      t(i) = time
      dt(i) = block_step(sqrt(eta * (a1 * s1 + j1**2) / (j1 * c1 + s1**2)), h, time)
      call send_j(i)
    end do
    steps = steps + na
    blocks = blocks + 1
  end do
  call system_clock(count1)
  e1 = energy(time)
  write (*, '(a, f0.4, a, f15.12, a, f15.12, a, es10.3)') 't = ', time, ': E0 = ', e0, &
    '  E1 = ', e1, '  dE/E = ', (e1 - e0) / e0
  write (*, '(i0, a, i0, a, f6.2, a)') steps, ' steps in ', blocks, ' blocks, ', &
    real(count1 - count0, dp) / rate, ' s'
  call check(g6_close(cid), 'g6_close')

contains

  subroutine check(rc, what)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: what
    character(len=300) :: message
    if (rc < 0) then
      call sapporo_error_message(message)
      write (0, '(a, a, a, a)') 'hermite: ', what, ' failed: ', trim(message)
      error stop 1
    end if
  end subroutine check

  ! Plummer sphere (Aarseth, Henon & Wielen 1974), centred, in Henon units.
  subroutine plummer()
    real(dp), parameter :: scale = 3 * pi / 16
    real(dp) :: r, qv, g, u(2)
    integer, allocatable :: seed(:)
    integer :: ns, j
    call random_seed(size=ns)
    allocate (seed(ns))
    seed = [(12345 + 7919 * j, j = 1, ns)]
    call random_seed(put=seed)
    do j = 1, n
      r = 11
      do while (r > 10)
        call random_number(u(1))
        r = 1 / sqrt(max(u(1), 1e-12_dp)**(-2.0_dp / 3) - 1)
      end do
      do
        call random_number(u)
        qv = u(1)
        g = 0.1_dp * u(2)
        if (g <= qv**2 * (1 - qv**2)**3.5_dp) exit
      end do
      m(j) = 1.0_dp / n
      x(:, j) = isotropic(r * scale)
      v(:, j) = isotropic(qv * sqrt(2.0_dp) * (1 + r**2)**(-0.25_dp) / sqrt(scale))
    end do
    do j = 1, 3
      x(j, :) = x(j, :) - sum(m * x(j, :))
      v(j, :) = v(j, :) - sum(m * v(j, :))
    end do
  end subroutine plummer

  function isotropic(r) result(p)
    real(dp), intent(in) :: r
    real(dp) :: p(3), u(2), z, phi, rho
    call random_number(u)
    z = (1 - 2 * u(1)) * r
    phi = 2 * pi * u(2)
    rho = sqrt(r**2 - z**2)
    p = [rho * cos(phi), rho * sin(phi), z]
  end function isotropic

  subroutine send_j(i)
    integer(c_int), intent(in) :: i
    real(dp) :: k18(3)
    k18 = 0
    call check(g6_set_j_particle(cid, i - 1, i - 1, t(i), dt(i), m(i), k18, jk(:, i) / 6, &
                                 a(:, i) / 2, v(:, i), x(:, i)), 'g6_set_j_particle')
  end subroutine send_j

  ! Forces at time ti on the ni particles list (0-based indices) at positions xq and
  ! velocities vq (by particle), into acc, jrk, phi (by position in list), in chunks.
  subroutine forces(ti, ni, list, xq, vq, acc, jrk, phi)
    real(dp), intent(in) :: ti, xq(:, :), vq(:, :)
    integer(c_int), intent(in) :: ni, list(:)
    real(dp), intent(inout) :: acc(:, :), jrk(:, :), phi(:)
    real(dp) :: xi(3, npipes), vi(3, npipes), h2(npipes)
    integer(c_int) :: c0, nc, p
    h2 = 0
    call check(g6_set_ti(cid, ti), 'g6_set_ti')
    do c0 = 1, ni, npipes
      nc = min(npipes, ni - c0 + 1)
      do p = 1, nc
        xi(:, p) = xq(:, list(c0 + p - 1) + 1)
        vi(:, p) = vq(:, list(c0 + p - 1) + 1)
      end do
      ! aold, j6old, phiold: hints for the hardware's number format, not read here
      call g6calc_firsthalf(cid, n, nc, list(c0:), xi, vi, acc(:, c0:), jrk(:, c0:), &
                            phi(c0:), eps2, h2)
      call check(g6calc_lasthalf(cid, n, nc, list(c0:), xi, vi, eps2, h2, acc(:, c0:), &
                                 jrk(:, c0:), phi(c0:)), 'g6calc_lasthalf')
    end do
  end subroutine forces

  real(dp) function energy(ti)
    real(dp), intent(in) :: ti
    real(dp) :: acc(3, n), jrk(3, n)
    call forces(ti, n, all, x, v, acc, jrk, pot)
    energy = sum(m * (0.5_dp * sum(v**2, dim=1) + 0.5_dp * pot))
  end function energy

  ! The largest power of two <= limit, halving dt_old, or doubling it where time allows.
  real(dp) function block_step(limit, dt_old, ti)
    real(dp), intent(in) :: limit, dt_old, ti
    block_step = dt_old
    do while (block_step > limit .and. block_step > dt_min)
      block_step = block_step / 2
    end do
    if (block_step == dt_old .and. 2 * block_step <= limit .and. 2 * block_step <= dt_max &
        .and. modulo(ti, 2 * block_step) == 0) block_step = 2 * block_step
  end function block_step

end program hermite
