! The GRAPE-5 calls PG5 lacks, from Fortran: 200 particles from ic.txt ("x y z m" lines),
! every one a j-particle and an i-particle, softening eps^2 = 1e-4 given squared
! (g5_set_eps2_to_all).  Opened by g5_open_special(0, ...), a range given (g5_set_range);
! "f" lines: masses, then positions, apart (g5_set_mj, g5_set_xj); "g" lines: both at once,
! masses first (g5_set_jp), after other particles were stored there.
program g5split
  implicit none
  integer, parameter :: n = 200
  double precision :: x(3, n), m(n), a(3, n), p(n), y(3, n)
  integer :: i, nn, ndev, adr, dev(1)

  open(10, file='ic.txt', status='old')
  do i = 1, n
     read(10, *) x(:, i), m(i)
  end do
  close(10)

  ndev = 0
  dev = 0
  call g5_open_special(ndev, dev)
  call g5_set_range(-10d0, 10d0, minval(m))
  call g5_set_eps2_to_all(1d-4)
  nn = n
  adr = 0
  call g5_set_mj(adr, nn, m)
  call g5_set_xj(adr, nn, x)
  call g5_set_n(nn)
  call g5_calculate_force_on_x(x, a, p, nn)
  do i = 1, n
     write(*, '(a, i0, 4es26.17)') 'f ', i - 1, a(:, i), p(i)
  end do

  y = 2 * x
  call g5_set_xmj(adr, nn, y, m)
  a = 0
  call g5_set_jp(adr, nn, m, x)
  call g5_calculate_force_on_x(x, a, p, nn)
  do i = 1, n
     write(*, '(a, i0, 4es26.17)') 'g ', i - 1, a(:, i), p(i)
  end do
  call g5_close()
end program g5split
