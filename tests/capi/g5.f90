! The GRAPE-5 calls from Fortran (names without the underscore, arguments by reference, as
! for Phantom-GRAPE's PG5): 200 particles from ic.txt ("x y z m" lines), every one a
! j-particle and an i-particle.  Context 0 through g5_set_xi / g5_run / g5_get_force per
! chunk of g5_get_number_of_pipelines() ("f" lines), context 2 through
! g5_calculate_force_on_xeMC ("g" lines), context 3 through sapporo's groups: particles 1-50
! and 51-200, each group with its own copy of all 200 as its list
! (g5_calculate_force_on_groupsMC, "h" lines); eps = 0.01 for all.
program g5f
  implicit none
  integer, parameter :: n = 200
  double precision :: x(3, n), m(n), a(3, n), p(n), eps2(n), xx(3, 2 * n), mm(2 * n)
  integer :: i, np, ni, off, nn, ctx, ioff(3), joff(3)
  integer, external :: g5_get_number_of_pipelines, g5_get_jmemsize

  open(10, file='ic.txt', status='old')
  do i = 1, n
     read(10, *) x(:, i), m(i)
  end do
  close(10)

  call g5_open()
  np = g5_get_number_of_pipelines()
  write(*, '(a, i0, a, l1)') 'pipelines ', np, ' jmem ', g5_get_jmemsize() >= n
  call g5_set_eps_to_all(0.01d0)
  nn = n
  call g5_set_xmj(0, nn, x, m)
  call g5_set_n(nn)
  off = 0
  do while (off < n)
     ni = min(np, n - off)
     call g5_set_xi(ni, x(1, off + 1))
     call g5_run()
     call g5_get_force(ni, a(1, off + 1), p(off + 1))
     off = off + ni
  end do
  do i = 1, n
     write(*, '(a, i0, 4es26.17)') 'f ', i - 1, a(:, i), p(i)
  end do

  ctx = 2
  eps2 = 1d-4
  a = 0
  call g5_set_xmjMC(ctx, 0, nn, x, m)
  call g5_set_nMC(ctx, nn)
  call g5_calculate_force_on_xeMC(ctx, x, eps2, a, p, nn)
  do i = 1, n
     write(*, '(a, i0, 4es26.17)') 'g ', i - 1, a(:, i), p(i)
  end do

  ctx = 3
  a = 0
  xx(:, 1:n) = x
  xx(:, n + 1:) = x
  mm(1:n) = m
  mm(n + 1:) = m
  ioff = [0, 50, n]
  joff = [0, n, 2 * n]
  call g5_set_xmjMC(ctx, 0, 2 * nn, xx, mm)
  call g5_calculate_force_on_groupsMC(ctx, 2, ioff, joff, x, a, p)
  do i = 1, n
     write(*, '(a, i0, 4es26.17)') 'h ', i - 1, a(:, i), p(i)
  end do
  call g5_close()
end program g5f
