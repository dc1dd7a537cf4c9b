! denormal.f90 -- a Fortran client that ends with STOP after a force call whose host-side
! arithmetic meets denormal numbers (coordinates of 1e-42).  gfortran prints "Note: The
! following floating-point exceptions are signalling: IEEE_DENORMAL" at STOP when a flag is
! still raised; the library restores the caller's floating-point flags after every call, so
! no such note may appear.  Prints "rc acc pot".
program denormal
  implicit none
  integer :: g6_open, g6_set_j_particle, g6_set_ti, g6calc_lasthalf, g6_close
  external :: g6calc_firsthalf
  integer :: rc, i, idx(4)
  double precision :: x(3, 4), v(3, 4), a(3, 4), j(3, 4), p(4), h2(4), z(3)
  z = 0d0
  v = 0d0
  h2 = 0d0
  rc = g6_open(0)
  do i = 1, 4
    x(:, i) = (/ dble(i), 1d-42 * i, 0d0 /)
    idx(i) = i - 1
    rc = g6_set_j_particle(0, i - 1, i - 1, 0d0, 0d0, 1d0, z, z, z, z, x(:, i))
  end do
  rc = g6_set_ti(0, 0d0)
  call g6calc_firsthalf(0, 4, 4, idx, x, v, a, j, p, 0d0, h2)
  rc = g6calc_lasthalf(0, 4, 4, idx, x, v, 0d0, h2, a, j, p)
  print *, rc, a(1, 2), p(2)
  rc = g6_close(0)
  stop
end program denormal
