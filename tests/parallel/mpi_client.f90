! mpi_client.f90 -- an MPI-parallel GRAPE-6 client in Fortran, run as phiGRAPE runs in its
! parallel mode: every rank opens the library, stores its own slice of the j-particles
! (particle i, counted from 1, on rank mod(i - 1, P) at local address (i - 1) / P), computes
! partial forces on every particle and sums them itself with MPI_Allreduce; the nearest
! neighbour comes from MPI_MINLOC over (r^2, index) pairs.  Every library call goes through
! the Fortran names (g6_open_, g6calc_firsthalf_, ...: gfortran adds the underscore), every
! argument by reference, arrays x(3, n).
!
! The j-particles carry an acceleration a = -x and a jerk j = -v (any values would do) at
! tj = 0, sent with the GRAPE-6 scaling (a/2, jerk/6, snap/18 = 0), and the forces are asked
! at ti = TI: the library predicts the j-particles, the client sends the i-particles
! predicted by itself, as a Hermite integrator does.
!
! usage: mpiexec -n P mpi_client_f IC_FILE OUT_FILE EPS2 TI TOL
!   IC_FILE: first line N, then N lines "m x y z vx vy vz".
!   Rank 0 writes OUT_FILE, "i ax ay az jx jy jz pot nn" per particle (indices from 0), and
!   checks every result against a float64 direct sum of its own, printing one line
!   "mpi_client_f: PASS ranks P n N max relative error acc E jerk E pot E nn mismatches K"
!   (FAIL instead of PASS when an error exceeds TOL or a nearest neighbour differs).  The
!   error of a row is |result - reference| / sum_j |term_j|, sapporo's error metric.
! Exit status: 0 on PASS; 1 on FAIL or a library error (every rank aborts then); 2 on bad
! usage.
program mpi_client_f
  use mpi
  implicit none
  integer, external :: g6_open, g6_close, g6_npipes, g6_set_ti, g6_set_j_particle
  integer, external :: g6calc_lasthalf2
  integer :: ierr, rank, nprocs, n, i, q, c0, nc, nloc, npipes, rc, mismatches
  double precision :: eps2, ti, tol, err_acc, err_jerk, err_pot, dx(3)
  double precision, allocatable :: m(:), x(:, :), v(:, :), xp(:, :), vp(:, :)
  double precision, allocatable :: acc(:, :), jrk(:, :), pot(:), near(:, :), best(:, :)
  double precision, allocatable :: pacc(:, :), pjrk(:, :), ppot(:)
  double precision, allocatable :: xi(:, :), vi(:, :), ai(:, :), ji(:, :), pi(:), h2(:)
  double precision, allocatable :: ref_acc(:, :), ref_jrk(:, :), ref_pot(:)
  double precision, allocatable :: acc_abs(:), jrk_abs(:), pot_abs(:)
  integer, allocatable :: idx(:), nnb(:), ref_nn(:)
  double precision :: zero(3), a2(3), j6(3)
  integer :: verdict(1)
  character(len=4096) :: icfile, outfile, arg
  character(len=4) :: word

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  if (command_argument_count() /= 5) then
    if (rank == 0) write (0, '(a)') 'usage: mpi_client_f IC_FILE OUT_FILE EPS2 TI TOL'
    call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  end if
  call get_command_argument(1, icfile)
  call get_command_argument(2, outfile)
  call get_command_argument(3, arg); read (arg, *) eps2
  call get_command_argument(4, arg); read (arg, *) ti
  call get_command_argument(5, arg); read (arg, *) tol

  ! every rank reads all particles: it needs them all as i-particles
  open (10, file=trim(icfile), status='old', action='read', iostat=rc)
  if (rc == 0) read (10, *, iostat=rc) n
  if (rc /= 0 .or. n < 1) call check('reading the initial conditions', -1)
  allocate (m(n), x(3, n), v(3, n), xp(3, n), vp(3, n))
  do i = 1, n
    read (10, *, iostat=rc) m(i), x(:, i), v(:, i)
    if (rc /= 0) call check('reading the initial conditions', -1)
  end do
  close (10)
  ! the client's own prediction to ti of x, v with a = -x, j = -v
  do i = 1, n
    xp(:, i) = x(:, i) + ti * (v(:, i) + ti * (-x(:, i) / 2 + ti * (-v(:, i) / 6)))
    vp(:, i) = v(:, i) + ti * (-x(:, i) + ti * (-v(:, i) / 2))
  end do

  call check('g6_open', g6_open(0))
  npipes = g6_npipes()
  if (npipes < 1) call check('g6_npipes', npipes)

  ! my slice of the j-particles, at local addresses 0, 1, ...; GRAPE-6 scaling
  zero = 0
  nloc = 0
  do i = rank + 1, n, nprocs
    a2 = -x(:, i) / 2
    j6 = -v(:, i) / 6
    call check('g6_set_j_particle', g6_set_j_particle(0, (i - 1) / nprocs, i - 1, 0d0, &
                                                      1d0, m(i), zero, j6, a2, v(:, i), x(:, i)))
    nloc = nloc + 1
  end do
  call check('g6_set_ti', g6_set_ti(0, ti))

  ! partial forces on every particle from my slice, npipes i-particles at a time
  allocate (pacc(3, n), pjrk(3, n), ppot(n), near(2, n))
  allocate (idx(npipes), nnb(npipes), xi(3, npipes), vi(3, npipes), ai(3, npipes))
  allocate (ji(3, npipes), pi(npipes), h2(npipes))
  h2 = 0
  ai = 0; ji = 0; pi = 0
  do c0 = 0, n - 1, npipes
    nc = min(npipes, n - c0)
    do q = 1, nc
      idx(q) = c0 + q - 1
      xi(:, q) = xp(:, c0 + q)
      vi(:, q) = vp(:, c0 + q)
    end do
    call g6calc_firsthalf(0, nloc, nc, idx, xi, vi, ai, ji, pi, eps2, h2)
    call check('g6calc_lasthalf2', g6calc_lasthalf2(0, nloc, nc, idx, xi, vi, eps2, h2, &
                                                    ai, ji, pi, nnb))
    do q = 1, nc
      i = c0 + q
      pacc(:, i) = ai(:, q)
      pjrk(:, i) = ji(:, q)
      ppot(i) = pi(q)
      ! r^2 of my nearest neighbour (indices from 0), for MINLOC; none: huge and index n
      near(1, i) = huge(1d0)
      near(2, i) = dble(n)
      if (nnb(q) >= 0) then
        dx = xp(:, nnb(q) + 1) - xp(:, i)
        near(1, i) = sum(dx**2)
        near(2, i) = dble(nnb(q))
      end if
    end do
  end do
  ! the sums over the ranks (separate send buffers: no MPI_IN_PLACE, an INTEGER in mpif.h
  ! and the mpi module, which compilers that check argument types across calls reject)
  allocate (acc(3, n), jrk(3, n), pot(n), best(2, n))
  call MPI_Allreduce(pacc, acc, 3 * n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(pjrk, jrk, 3 * n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(ppot, pot, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  ! smallest r^2; MINLOC takes the lower index on ties
  call MPI_Allreduce(near, best, n, MPI_2DOUBLE_PRECISION, MPI_MINLOC, MPI_COMM_WORLD, ierr)
  write (*, '(a, i0, a, i0, a, i0, a)') 'rank ', rank, ' of ', nprocs, ': ', nloc, &
    ' j-particles'

  verdict = 0
  if (rank == 0) then
    open (11, file=trim(outfile), status='replace', action='write')
    do i = 1, n
      write (11, '(i0, 7(1x, es25.17), 1x, i0)') i - 1, acc(:, i), jrk(:, i), pot(i), &
        merge(nint(best(2, i)), -1, nint(best(2, i)) < n)
    end do
    close (11)
    allocate (ref_acc(3, n), ref_jrk(3, n), ref_pot(n), acc_abs(n), jrk_abs(n), pot_abs(n))
    allocate (ref_nn(n))
    call reference()
    err_acc = 0; err_jerk = 0; err_pot = 0
    mismatches = 0
    do i = 1, n
      err_acc = max(err_acc, scaled(norm2(acc(:, i) - ref_acc(:, i)), acc_abs(i)))
      err_jerk = max(err_jerk, scaled(norm2(jrk(:, i) - ref_jrk(:, i)), jrk_abs(i)))
      err_pot = max(err_pot, scaled(abs(pot(i) - ref_pot(i)), pot_abs(i)))
      if (nint(best(2, i)) /= ref_nn(i)) mismatches = mismatches + 1
    end do
    ! a NaN fails too: it is not <= tol
    if (.not. (err_acc <= tol .and. err_jerk <= tol .and. err_pot <= tol) &
        .or. mismatches /= 0) verdict = 1
    word = merge('PASS', 'FAIL', verdict(1) == 0)
    write (*, '(a, a, a, i0, a, i0, a, es10.3, a, es10.3, a, es10.3, a, i0)') &
      'mpi_client_f: ', word, ' ranks ', nprocs, ' n ', n, ' max relative error acc ', &
      err_acc, ' jerk ', err_jerk, ' pot ', err_pot, ' nn mismatches ', mismatches
  end if
  call MPI_Bcast(verdict, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call check('g6_close', g6_close(0))
  call MPI_Finalize(ierr)
  if (verdict(1) /= 0) stop 1

contains

  ! On a library error: a message and every rank stops.
  subroutine check(what, code)
    character(len=*), intent(in) :: what
    integer, intent(in) :: code
    integer :: ierr2
    if (code /= 0) then
      write (0, '(a, i0, a, a, a, i0)') 'mpi_client_f: rank ', rank, ': ', what, &
        ' failed with ', code
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr2)
    end if
  end subroutine check

  double precision function scaled(diff, scale)
    double precision, intent(in) :: diff, scale
    if (scale > 0) then
      scaled = diff / scale
    else
      scaled = diff
    end if
  end function scaled

  ! The float64 direct sum over all j /= i at the predicted positions and velocities; the
  ! sums of the terms' magnitudes (the error scales); the nearest neighbour by r^2 unsoftened.
  subroutine reference()
    integer :: ii, jj
    double precision :: r(3), w(3), r2, rinv, rinv3, rv, t(3), d2min
    ref_acc = 0; ref_jrk = 0; ref_pot = 0
    acc_abs = 0; jrk_abs = 0; pot_abs = 0
    do ii = 1, n
      d2min = huge(1d0)
      ref_nn(ii) = -1
      do jj = 1, n
        if (jj == ii) cycle
        r = xp(:, jj) - xp(:, ii)
        w = vp(:, jj) - vp(:, ii)
        if (sum(r**2) < d2min) then
          d2min = sum(r**2)
          ref_nn(ii) = jj - 1
        end if
        r2 = sum(r**2) + eps2
        rinv = 1 / sqrt(r2)
        rinv3 = rinv / r2
        rv = dot_product(r, w)
        t = m(jj) * rinv3 * r
        ref_acc(:, ii) = ref_acc(:, ii) + t
        acc_abs(ii) = acc_abs(ii) + norm2(t)
        t = m(jj) * rinv3 * (w - 3 * rv / r2 * r)
        ref_jrk(:, ii) = ref_jrk(:, ii) + t
        jrk_abs(ii) = jrk_abs(ii) + norm2(t)
        ref_pot(ii) = ref_pot(ii) - m(jj) * rinv
        pot_abs(ii) = pot_abs(ii) + m(jj) * rinv
      end do
    end do
  end subroutine reference
end program mpi_client_f
