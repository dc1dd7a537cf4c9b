! sapporo_g6.f90 -- explicit interfaces to sapporo's GRAPE-6 library for Fortran programs.
!
!     use sapporo_g6
!
! gives the GRAPE-6 functions with their argument types checked by the compiler.  Without
! this module a Fortran program can still call them as external procedures, as GRAPE-6 codes
! always did (`integer :: g6_open` ... `rc = g6_open(0)`): the compiler then appends the
! trailing underscore and links g6_open_, but checks nothing.  Here each interface binds
! the Fortran name to that same symbol (bind(C, name="g6_open_")), every argument passed
! by reference, as the library expects.  Arrays are (3, n): column i is particle i.
!
! Build: compile this file before the program that uses it, and link the library:
!     gfortran -O2 -c sapporo_g6.f90
!     gfortran -O2 -o hermite hermite.f90 sapporo_g6.o $(sapporo capi flags)
!
! Conventions (grape6.h has the details): G = 1; j-particles are given with a2 = a/2,
! j6 = jerk/6, k18 = snap/18 and predicted by the library to the time of g6_set_ti; an
! i-particle never interacts with a j-particle of its own index; integer functions return 0
! or a positive value on success and a negative SAPPORO_ERR_* code on error, whose message
! sapporo_error_message returns.  cluster_id is accepted and ignored.
module sapporo_g6
  use, intrinsic :: iso_c_binding, only: c_int, c_double, c_char, c_size_t
  implicit none
  private

  integer, parameter, public :: SAPPORO_OK = 0
  integer, parameter, public :: SAPPORO_ERR_INPUT = -1
  integer, parameter, public :: SAPPORO_ERR_STATE = -2
  integer, parameter, public :: SAPPORO_ERR_CONFIG = -3
  integer, parameter, public :: SAPPORO_ERR_BACKEND = -4
  integer, parameter, public :: SAPPORO_ERR_NONFINITE = -5
  integer, parameter, public :: SAPPORO_ERR_INTERNAL = -6

  public :: g6_open, g6_close, g6_npipes, g6_get_nj_max, g6_set_ti, g6_set_j_particle
  public :: g6calc_firsthalf, g6calc_lasthalf, g6calc_lasthalf2
  public :: g6_read_neighbour_list, g6_get_neighbour_list, g6_flush_jp_buffer
  public :: sapporo_error_message, sapporo_version_string

  interface
    ! Open the library (order, precision, devices from SAPPORO_* variables).
    integer(c_int) function g6_open(cluster_id) bind(C, name="g6_open_")
      import :: c_int
      integer(c_int), intent(in) :: cluster_id
    end function g6_open

    ! Release the devices; the library can be opened again.
    integer(c_int) function g6_close(cluster_id) bind(C, name="g6_close_")
      import :: c_int
      integer(c_int), intent(in) :: cluster_id
    end function g6_close

    ! Most i-particles per force call (SAPPORO_NPIPES, default 128); never an error code.
    integer(c_int) function g6_npipes() bind(C, name="g6_npipes_")
      import :: c_int
    end function g6_npipes

    ! j-capacity: addresses 0 .. g6_get_nj_max() - 1 (0 when not open).
    integer(c_int) function g6_get_nj_max() bind(C, name="g6_get_nj_max_")
      import :: c_int
    end function g6_get_nj_max

    ! Time to which the j-particles are predicted before the next force call.
    integer(c_int) function g6_set_ti(cluster_id, ti) bind(C, name="g6_set_ti_")
      import :: c_int, c_double
      integer(c_int), intent(in) :: cluster_id
      real(c_double), intent(in) :: ti
    end function g6_set_ti

    ! Store particle `index` in slot `address` (0-based): values at time tj; dtj unread.
    integer(c_int) function g6_set_j_particle(cluster_id, address, index, tj, dtj, mass, &
                                              k18, j6, a2, v, x) &
        bind(C, name="g6_set_j_particle_")
      import :: c_int, c_double
      integer(c_int), intent(in) :: cluster_id, address, index
      real(c_double), intent(in) :: tj, dtj, mass
      real(c_double), intent(in) :: k18(3), j6(3), a2(3), v(3), x(3)
    end function g6_set_j_particle

    ! Start the force on ni i-particles from j-slots 0 .. nj-1.  aold, j6old, phiold are
    ! not read (order 6 reads aold); h2(i) > 0 asks for i's neighbour list.
    subroutine g6calc_firsthalf(cluster_id, nj, ni, index, xi, vi, aold, j6old, phiold, &
                                eps2, h2) bind(C, name="g6calc_firsthalf_")
      import :: c_int, c_double
      integer(c_int), intent(in) :: cluster_id, nj, ni
      integer(c_int), intent(in) :: index(*)
      real(c_double), intent(in) :: xi(3, *), vi(3, *), aold(3, *), j6old(3, *), phiold(*)
      real(c_double), intent(in) :: eps2, h2(*)
    end subroutine g6calc_firsthalf

    ! Collect it: acceleration, jerk, potential (errors of firsthalf are returned here).
    integer(c_int) function g6calc_lasthalf(cluster_id, nj, ni, index, xi, vi, eps2, h2, &
                                            acc, jerk, pot) bind(C, name="g6calc_lasthalf_")
      import :: c_int, c_double
      integer(c_int), intent(in) :: cluster_id, nj, ni
      integer(c_int), intent(in) :: index(*)
      real(c_double), intent(in) :: xi(3, *), vi(3, *), eps2, h2(*)
      real(c_double), intent(inout) :: acc(3, *), jerk(3, *), pot(*)
    end function g6calc_lasthalf

    ! As g6calc_lasthalf, plus the index of each i-particle's nearest neighbour (-1: none).
    integer(c_int) function g6calc_lasthalf2(cluster_id, nj, ni, index, xi, vi, eps2, h2, &
                                             acc, jerk, pot, nnb) &
        bind(C, name="g6calc_lasthalf2_")
      import :: c_int, c_double
      integer(c_int), intent(in) :: cluster_id, nj, ni
      integer(c_int), intent(in) :: index(*)
      real(c_double), intent(in) :: xi(3, *), vi(3, *), eps2, h2(*)
      real(c_double), intent(inout) :: acc(3, *), jerk(3, *), pot(*)
      integer(c_int), intent(inout) :: nnb(*)
    end function g6calc_lasthalf2

    ! Bring the last call's neighbour lists to the host: 0, or 1 if one overflowed.
    integer(c_int) function g6_read_neighbour_list(cluster_id) &
        bind(C, name="g6_read_neighbour_list_")
      import :: c_int
      integer(c_int), intent(in) :: cluster_id
    end function g6_read_neighbour_list

    ! List of i-particle ipipe (0-based): up to maxlength indices, ascending, into nbl;
    ! its full length into nblen.  0, or 1 if it did not fit.
    integer(c_int) function g6_get_neighbour_list(cluster_id, ipipe, maxlength, nblen, nbl) &
        bind(C, name="g6_get_neighbour_list_")
      import :: c_int
      integer(c_int), intent(in) :: cluster_id, ipipe, maxlength
      integer(c_int), intent(out) :: nblen
      integer(c_int), intent(inout) :: nbl(*)
    end function g6_get_neighbour_list

    ! Send the buffered j-particles now (g6_set_ti and force calls do it anyway).
    integer(c_int) function g6_flush_jp_buffer(cluster_id) bind(C, name="g6_flush_jp_buffer_")
      import :: c_int
      integer(c_int), intent(in) :: cluster_id
    end function g6_flush_jp_buffer

    subroutine c_last_error(message, message_len) bind(C, name="sapporo_last_error_")
      import :: c_char, c_size_t
      character(kind=c_char), intent(out) :: message(*)
      integer(c_size_t), value :: message_len
    end subroutine c_last_error

    subroutine c_version(text, text_len) bind(C, name="sapporo_version_")
      import :: c_char, c_size_t
      character(kind=c_char), intent(out) :: text(*)
      integer(c_size_t), value :: text_len
    end subroutine c_version
  end interface

contains

  ! The message of the most recent error (blank when none), truncated to len(message).
  subroutine sapporo_error_message(message)
    character(len=*), intent(out) :: message
    call c_last_error(message, int(len(message), c_size_t))
  end subroutine sapporo_error_message

  ! The version of the sapporo package behind the library.
  subroutine sapporo_version_string(text)
    character(len=*), intent(out) :: text
    call c_version(text, int(len(text), c_size_t))
  end subroutine sapporo_version_string

end module sapporo_g6
