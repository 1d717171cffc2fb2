# The C side of plateau_slope.py (docs/COMPILED.md): the detector's typed fields (the base
# class holds them all: its methods and plateau.py's read them) and the slope's methods.
from libc.math cimport log, sqrt

from .base cimport _GAP, Detector, decay


cdef class PlateauSlope(Detector):
    # constructor arguments: the floats as given (repr, clone), the ints and the bool typed
    cdef readonly object min_progress, flat, halflife, slow_halflife, slow_keep, slow_z
    cdef readonly object accel_z, slow_points, slow_effect, clip, min_progress_z
    cdef readonly long long grace, min_points, window, slow_span, slow_warmup, frozen_points
    cdef readonly double slow_ratio
    cdef readonly bint slowdown
    cdef double _c_min_progress, _c_min_progress_z, _c_flat, _c_halflife, _c_slow_halflife
    cdef double _c_slow_keep, _c_slow_z, _c_accel_z, _c_slow_points, _c_slow_effect, _c_clip
    cdef double _c_lr, _c_level
    # learned state (STATE; _sums, _armed, _onset, _hole, _last_n, _slopes, _ring: properties)
    cdef public double _lnoise, _prev, _before, _level, _dprev, _ref, _best, _dt, _u, _t, _noise
    cdef public long long _same, _first, _last, _n, _dec
    cdef public bint _slow
    cdef long long _v_last_n
    cdef double _sW, _sWu, _sWuu, _sWy, _sWuy, _sV, _sVu, _sVuu
    cdef double _arm_b, _arm_se, _arm_r, _on_u, _on_level, _on_slope, _on_r
    cdef double _hole_lo, _hole_hi, _slope_u
    cdef list _v_slopes, _v_ring
    cdef long long _ring_last, _ring0_step
    cdef double _ring0_level, _ring0_pred
    cdef bint _ring0_nopred
    # the last observe() (PlateauState's fields; ``z`` is ``slow_z``)
    cdef readonly long long step, repeats, onset
    cdef readonly bint active
    cdef readonly object rule
    cdef readonly double progress, level, z, shortfall, progress_z, expected, observed

    cdef void _reset_slope(self)
    cdef double _slowdown(self, long long step, double loss) except? -1.0
    cdef double _shortfall(self, long long step, double level) except? -1.0
    cdef void _arm(self, double u) except *
    cdef bint _stagnant(self, long long step, object l_pred) except -1
    cdef void _ring_cache(self) except *
