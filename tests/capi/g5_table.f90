! PG5/table's calls from Fortran (names without the underscore, arguments by reference): 200
! particles from ic.txt ("x y z m" lines), every one a j-particle and an i-particle.  The S2
! split length 0.5 by g5_set_cutoff_scale before g5_open; g5_set_eta and g5_set_cutoff_table
! (given two functions, which are never called) as a TreePM code calls them; eps = 0.01.
! Prints "f i ax ay az pot" from g5_calculate_force_on_x.
program g5table
  implicit none
  integer, parameter :: n = 200
  double precision :: x(3, n), m(n), a(3, n), p(n)
  integer :: i, nn
  double precision, external :: fcut

  open(10, file='ic.txt', status='old')
  do i = 1, n
     read(10, *) x(:, i), m(i)
  end do
  close(10)

  call g5_set_cutoff_scale(0.5d0)
  call g5_open()
  call g5_set_eta(0.25d0)
  call g5_set_cutoff_table(fcut, 2d0, 0d0, fcut, 2d0, 0d0)
  call g5_set_eps_to_all(0.01d0)
  nn = n
  call g5_set_xmj(0, nn, x, m)
  call g5_set_n(nn)
  call g5_calculate_force_on_x(x, a, p, nn)
  do i = 1, n
     write(*, '(a, i0, 4es26.17)') 'f ', i - 1, a(:, i), p(i)
  end do
  call g5_close()
end program g5table

double precision function fcut(x)
  implicit none
  double precision :: x
  fcut = max(0d0, 1d0 - x / 2d0)
end function fcut
