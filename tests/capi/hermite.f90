! hermite.f90 -- a block-time-step 4th-order Hermite integrator on the GRAPE-6 Fortran names.
!
! usage: hermite_f IC_FILE OUT_PREFIX EPS2 T_END ETA H2   (the same as hermite.c)
! Writes OUT_PREFIX.forces and OUT_PREFIX.nb for the first force call and prints
! "E0 <e> E1 <e> steps <n> blocks <n>".  Every library call goes through the underscore
! names (g6_open_, g6calc_firsthalf_, ...), arguments by reference, arrays x(3, n).
program hermite_f
  implicit none
  integer, external :: g6_open, g6_close, g6_npipes, g6_set_ti, g6_set_j_particle
  integer, external :: g6calc_lasthalf, g6calc_lasthalf2, g6_read_neighbour_list
  integer, external :: g6_get_neighbour_list, g6_set_tunit, g6_set_xunit, g6_reset
  integer, external :: g6_initialize_jp_buffer, g6_flush_jp_buffer
  double precision, parameter :: dt_max = 1d0 / 16d0
  integer, parameter :: maxnb = 512
  integer :: n, npipes, i, q, na, rc, steps, blocks
  double precision :: eps2, t_end, eta, h2, time, tnext, e0, e1, h
  double precision, allocatable :: m(:), x(:,:), v(:,:), a(:,:), j(:,:), a2(:,:), pot(:)
  double precision, allocatable :: t(:), dt(:), xp(:,:), vp(:,:), an(:,:), jn(:,:)
  integer, allocatable :: active(:), nnb(:)
  double precision :: s(3), c(3), limit
  character(len=4096) :: arg, prefix

  if (command_argument_count() /= 6) then
    write (0, '(a)') 'usage: hermite_f IC_FILE OUT_PREFIX EPS2 T_END ETA H2'
    stop 2
  end if
  call get_command_argument(1, arg)
  open (10, file=trim(arg), status='old', action='read')
  read (10, *) n
  call get_command_argument(2, prefix)
  call get_command_argument(3, arg); read (arg, *) eps2
  call get_command_argument(4, arg); read (arg, *) t_end
  call get_command_argument(5, arg); read (arg, *) eta
  call get_command_argument(6, arg); read (arg, *) h2
  allocate (m(n), x(3, n), v(3, n), a(3, n), j(3, n), a2(3, n), pot(n), t(n), dt(n))
  allocate (xp(3, n), vp(3, n), an(3, n), jn(3, n), active(n), nnb(n))
  do i = 1, n
    read (10, *) m(i), x(:, i), v(:, i)
  end do
  close (10)

  rc = g6_open(0)
  call check('g6_open', rc)
  npipes = g6_npipes()
  if (npipes < 1) call check('g6_npipes', npipes)
  rc = g6_set_tunit(51)
  rc = g6_set_xunit(51d0)
  call g6_set_neighbour_list_sort_mode(1)
  call check('g6_reset', g6_reset(0))
  call check('g6_initialize_jp_buffer', g6_initialize_jp_buffer(0, 1024))

  a = 0; j = 0; a2 = 0; t = 0; dt = 0
  do i = 1, n
    active(i) = i
    call send_j(i)
  end do
  call check('g6_set_ti', g6_set_ti(0, 0d0))
  open (11, file=trim(prefix)//'.nb', status='replace', action='write')
  call forces(n, active, x, v, a, j, .true., h2, .true.)
  close (11)
  open (12, file=trim(prefix)//'.forces', status='replace', action='write')
  do i = 1, n
    write (12, '(i0, 7(1x, es25.17), 1x, i0)') i - 1, a(:, i), j(:, i), pot(i), nnb(i)
  end do
  close (12)

  do i = 1, n
    dt(i) = block_step(0.01d0 * vnorm(a(:, i)) / vnorm(j(:, i)), dt_max, 0d0)
    call send_j(i)
  end do
  call check('g6_flush_jp_buffer', g6_flush_jp_buffer(0))
  e0 = energy()

  steps = 0; blocks = 0; time = 0
  do while (time < t_end)
    tnext = minval(t + dt)
    na = 0
    do i = 1, n
      if (t(i) + dt(i) == tnext) then
        na = na + 1
        active(na) = i
      end if
    end do
    time = tnext
    call check('g6_set_ti', g6_set_ti(0, time))
    do q = 1, na
      i = active(q)
      h = time - t(i)
      xp(:, i) = x(:, i) + h * (v(:, i) + h * (a(:, i) / 2 + h * j(:, i) / 6))
      vp(:, i) = v(:, i) + h * (a(:, i) + h * j(:, i) / 2)
    end do
    call forces(na, active, xp, vp, an, jn, .false., 0d0, .false.)
    do q = 1, na
      i = active(q)
      h = time - t(i)
      s = (-6 * (a(:, i) - an(:, q)) - h * (4 * j(:, i) + 2 * jn(:, q))) / h**2
      c = (12 * (a(:, i) - an(:, q)) + 6 * h * (j(:, i) + jn(:, q))) / h**3
      x(:, i) = xp(:, i) + h**4 * (s / 24 + h * c / 120)
      v(:, i) = vp(:, i) + h**3 * (s / 6 + h * c / 24)
      a(:, i) = an(:, q)
      j(:, i) = jn(:, q)
      a2(:, i) = s + h * c
      limit = sqrt(eta * (vnorm(a(:, i)) * vnorm(a2(:, i)) + vnorm(j(:, i))**2) &
                   / (vnorm(j(:, i)) * vnorm(c) + vnorm(a2(:, i))**2))
      t(i) = time
      dt(i) = block_step(limit, h, time)
      call send_j(i)
    end do
    steps = steps + na
    blocks = blocks + 1
  end do
  e1 = energy()
  write (*, '(a, es25.17, a, es25.17, a, i0, a, i0)') 'E0 ', e0, ' E1 ', e1, ' steps ', steps, &
    ' blocks ', blocks
  call check('g6_close', g6_close(0))

contains

  subroutine check(what, code)
    character(len=*), intent(in) :: what
    integer, intent(in) :: code
    if (code /= 0) then
      write (0, '(a, a, i0)') what, ' failed with ', code
      stop 1
    end if
  end subroutine check

  subroutine send_j(i)
    integer, intent(in) :: i
    double precision :: k18(3), j6(3), ah(3)
    k18 = a2(:, i) / 18
    j6 = j(:, i) / 6
    ah = a(:, i) / 2
    call check('g6_set_j_particle', &
      g6_set_j_particle(0, i - 1, i - 1, t(i), dt(i), m(i), k18, j6, ah, v(:, i), x(:, i)))
  end subroutine send_j

  ! Forces on the particles list(1:ni) at positions xs, vs into acc(:, q), jrk(:, q), pot(q);
  ! with want_nnb the nearest neighbours into nnb(q), with lists the neighbour lists to unit 11.
  subroutine forces(ni, list, xs, vs, acc, jrk, want_nnb, radius2, lists)
    integer, intent(in) :: ni, list(:)
    double precision, intent(in) :: xs(:, :), vs(:, :), radius2
    double precision, intent(inout) :: acc(:, :), jrk(:, :)
    logical, intent(in) :: want_nnb, lists
    integer :: idx(npipes), nbl(maxnb), c0, nc, qq, len, rc2, k
    double precision :: xi(3, npipes), vi(3, npipes), h2i(npipes), aold(3, npipes)
    double precision :: j6old(3, npipes), phiold(npipes)
    aold = 0; j6old = 0; phiold = 0
    do c0 = 0, ni - 1, npipes
      nc = min(npipes, ni - c0)
      do qq = 1, nc
        idx(qq) = list(c0 + qq) - 1
        xi(:, qq) = xs(:, list(c0 + qq))
        vi(:, qq) = vs(:, list(c0 + qq))
        h2i(qq) = radius2
      end do
      call g6calc_firsthalf(0, n, nc, idx, xi, vi, aold, j6old, phiold, eps2, h2i)
      if (want_nnb) then
        rc2 = g6calc_lasthalf2(0, n, nc, idx, xi, vi, eps2, h2i, acc(:, c0 + 1:), &
                               jrk(:, c0 + 1:), pot(c0 + 1:), nnb(c0 + 1:))
      else
        rc2 = g6calc_lasthalf(0, n, nc, idx, xi, vi, eps2, h2i, acc(:, c0 + 1:), &
                              jrk(:, c0 + 1:), pot(c0 + 1:))
      end if
      call check('g6calc_lasthalf', rc2)
      if (lists) then
        call check('g6_read_neighbour_list', g6_read_neighbour_list(0))
        do qq = 1, nc
          call check('g6_get_neighbour_list', g6_get_neighbour_list(0, qq - 1, maxnb, len, nbl))
          write (11, '(i0, 1x, i0)', advance='no') idx(qq), len
          do k = 1, len
            write (11, '(1x, i0)', advance='no') nbl(k)
          end do
          write (11, *)
        end do
      end if
    end do
  end subroutine forces

  double precision function energy()
    integer :: ii
    double precision, allocatable :: acc(:, :), jrk(:, :)
    allocate (acc(3, n), jrk(3, n))
    do ii = 1, n
      active(ii) = ii
    end do
    call check('g6_set_ti', g6_set_ti(0, t(1)))
    call forces(n, active, x, v, acc, jrk, .false., 0d0, .false.)
    energy = 0
    do ii = 1, n
      energy = energy + 0.5d0 * m(ii) * (sum(v(:, ii)**2) + pot(ii))
    end do
  end function energy

  ! Largest power of two <= limit, at most twice dt_old, that divides time.
  double precision function block_step(lim, dt_old, tt)
    double precision, intent(in) :: lim, dt_old, tt
    block_step = dt_old
    do while (block_step > lim .and. block_step > 2d0**(-30))
      block_step = block_step / 2
    end do
    if (block_step == dt_old .and. 2 * block_step <= lim .and. 2 * block_step <= dt_max &
        .and. modulo(tt, 2 * block_step) == 0) block_step = 2 * block_step
  end function block_step

  double precision function vnorm(p)
    double precision, intent(in) :: p(3)
    vnorm = sqrt(sum(p**2))
  end function vnorm
end program hermite_f
