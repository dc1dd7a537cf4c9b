! ext8.f90 -- sapporo's order-8 extension through its Fortran names (the same job as ext8.c).
!
! usage: ext8_f IC_FILE OUT TI EPS2
! Opens with sapporo_open(8, 'double', ' ', 0, devs), stores unscaled j-particles with snap,
! crackle, pop and d5, predicts to TI and writes OUT:
! "index ax ay az jx jy jz sx sy sz cx cy cz pot nnb nn_r2" per particle.  h2(1) < 0: no
! neighbour lists.
program ext8_f
  implicit none
  integer, external :: sapporo_open, sapporo_set_j_particle8, sapporo_calc_lasthalf8
  integer, external :: sapporo_flush, g6_set_ti, g6_npipes, g6_close
  integer :: n, i, q, rc, np, c0, nc, devs(1)
  double precision :: ti, eps2, h2(1)
  double precision, allocatable :: d(:, :), xi(:, :), vi(:, :), ai(:, :), ji(:, :)
  double precision, allocatable :: acc(:, :), jerk(:, :), snap(:, :), crackle(:, :)
  double precision, allocatable :: pot(:), nn_r2(:)
  integer, allocatable :: idx(:), nnb(:)
  character(len=4096) :: arg, outfile
  character(len=300) :: msg

  if (command_argument_count() /= 4) then
    write (0, '(a)') 'usage: ext8_f IC_FILE OUT TI EPS2'
    stop 2
  end if
  call get_command_argument(1, arg)
  open (10, file=trim(arg), status='old', action='read')
  read (10, *) n
  allocate (d(25, n))
  do i = 1, n
    read (10, *) d(:, i)
  end do
  close (10)
  call get_command_argument(2, outfile)
  call get_command_argument(3, arg); read (arg, *) ti
  call get_command_argument(4, arg); read (arg, *) eps2

  devs(1) = 0
  rc = sapporo_open(8, 'double', ' ', 0, devs)
  call check('sapporo_open', rc)
  do i = 1, n
    rc = sapporo_set_j_particle8(i - 1, i - 1, 0d0, d(1, i), d(2:4, i), d(5:7, i), &
                                 d(8:10, i), d(11:13, i), d(14:16, i), d(17:19, i), &
                                 d(20:22, i), d(23:25, i))
    call check('sapporo_set_j_particle8', rc)
  end do
  call check('sapporo_flush', sapporo_flush())
  call check('g6_set_ti', g6_set_ti(0, ti))
  np = g6_npipes()
  allocate (idx(np), xi(3, np), vi(3, np), ai(3, np), ji(3, np))
  allocate (acc(3, n), jerk(3, n), snap(3, n), crackle(3, n), pot(n), nnb(n), nn_r2(n))
  h2(1) = -1d0
  do c0 = 0, n - 1, np
    nc = min(np, n - c0)
    do q = 1, nc
      idx(q) = c0 + q - 1
      xi(:, q) = d(2:4, c0 + q)
      vi(:, q) = d(5:7, c0 + q)
      ai(:, q) = d(8:10, c0 + q)
      ji(:, q) = d(11:13, c0 + q)
    end do
    call sapporo_calc_firsthalf8(n, nc, idx, xi, vi, ai, ji, eps2, h2)
    rc = sapporo_calc_lasthalf8(nc, acc(:, c0 + 1:), jerk(:, c0 + 1:), snap(:, c0 + 1:), &
                                crackle(:, c0 + 1:), pot(c0 + 1:), nnb(c0 + 1:), &
                                nn_r2(c0 + 1:))
    call check('sapporo_calc_lasthalf8', rc)
  end do
  open (11, file=trim(outfile), status='replace', action='write')
  do i = 1, n
    write (11, '(i0, 13(1x, es25.17e3), 1x, i0, 1x, es25.17e3)') i - 1, acc(:, i), &
      jerk(:, i), snap(:, i), crackle(:, i), pot(i), nnb(i), nn_r2(i)
  end do
  close (11)
  call check('g6_close', g6_close(0))

contains

  subroutine check(what, code)
    character(len=*), intent(in) :: what
    integer, intent(in) :: code
    if (code /= 0) then
      call sapporo_last_error(msg)
      write (0, '(a, a, i0, a, a)') what, ': ', code, ' ', trim(msg)
      stop 1
    end if
  end subroutine check
end program ext8_f
