"""CMSSW's Broken Line track fit (RecoTracker/PixelTrackFitting's ``brokenline`` namespace and
the ``Kernel_BLFastFit`` / ``Kernel_BLFit`` kernels of RecoTracker/PixelSeeding) in alpyka's
kernel language: one track per thread, its hits, matrices and vectors in per-thread arrays
(``acc.local_array``), the linear systems solved by ``pk.linalg``, on every backend.

Per track of ``N`` hits (3 to 5; one kernel per ``N``, as CMSSW's ``template <int N>``):

1. the fast pre-fit: the circle through the first, a middle and the last hit, tan(theta) from
   the first and last (``fast_fit``);
2. the data the two fits share (``prepare_broken_line_data``): the charge, each hit less the
   pre-fit centre, the transverse arc lengths, the s-z coordinates turned onto the pre-fit line,
   the multiple-scattering kink variances;
3. the line fit in the s-z plane (``line_fit``: an N x N band system) and the circle fit in the
   transverse plane with the curvature correction (``circle_fit``: N + 1 unknowns), each inverting
   its matrix with ``pk.linalg.cholesky_inverse`` (CMSSW's ``cholesky::invert``) and propagating
   covariances with ``pk.linalg.similarity`` (Eigen's ``J * C * J.transpose()``);
4. the output of CMSSW's fit kernel: the state (phi, tip, charge / pt, cot(theta), zip), its 15
   packed covariance entries (``copyFromCircle``), pt, eta and the reduced chi2, in float64 (CMSSW
   stores float32).

The tracks come grouped by hit count as CMSSW's ``tupleMultiplicity``: ``pk.tools.one_to_many``
of the hit counts gives each count's track ids. CMSSW's two kernels per ``N`` (the pre-fit writes
the hits and its result to global memory for the fit) are one kernel here: the hits stay in the
thread's arrays. The tracks, generated helices with multiple scattering, and a numpy reference
of the same algorithm come from examples/broken_line_reference.py; the fit agrees with it within
float64 rounding on every backend, and the backends agree bit for bit.

Run: python examples/broken_line_fit.py [backend] [--tracks N] [--seed S] [--repeats R]
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from pathlib import Path

import numpy as np

import portable as pk
import soa
from portable.cli import at_least, backend_argument, description, run_script

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broken_line_reference as reference  # the generator and the numpy reference, beside this file

MAX_HITS = reference.MAX_HITS
#: threads of a block on a GPU, tracks a thread takes per step on a CPU (CMSSW: 64-thread blocks)
BLOCK = 64


class Hits(soa.Layout):
    """The fit's input, one row per track: the hits' global positions (CMSSW's ``hits``, 3 x N)
    and their covariances (``hits_ge``, 6 x N float32: xx, xy, yy, xz, yz, zz)."""

    xyz = soa.matrix(np.float64, 3, MAX_HITS)
    ge = soa.matrix(np.float32, 6, MAX_HITS)


class Tracks(soa.Layout):
    """The fit's output per track (CMSSW's TrackSoA fields, in float64)."""

    state = soa.vector(np.float64, 5)
    covariance = soa.vector(np.float64, 15)
    pt = soa.column(np.float64)
    eta = soa.column(np.float64)
    chi2 = soa.column(np.float64)
    charge = soa.column(np.int8)


# ----------------------------------------------------------------------------- the brokenline namespace


@pk.device_function
def mult_scatt(acc, length, b_field, radius, slope):
    """The variance of the planar multiple-scattering angle over ``length`` (beta = 1, pt capped
    at 50 GeV, 0.06/16 radiation lengths per cm, geometry factor 0.7)."""
    pt = min(50.0, b_field * radius)
    x = abs(length) * (0.06 / 16.0)
    f = 1.0 + 0.038 * math.log(x)
    return 0.7 * (13.6 / 1000.0) * (13.6 / 1000.0) / (pt * pt * (1.0 + slope * slope)) * x * (f * f)


@pk.device_function
def rotation(acc, slope):
    """The cosine and sine of the rotation taking the line y = slope * x onto y = 0 (CMSSW's
    ``rotationMatrix``: ``[[c, s], [-s, c]]``), returned together."""
    c = 1.0 / math.sqrt(1.0 + slope * slope)
    return c, slope * c


@pk.device_function
def middle_hit(acc, hits, n):
    """x and y of CMSSW's middle hit: hit 1 of 3, else of the two central hits the one farther
    from the midpoint of the first and last. (Chosen by value, not by a run-time index: a
    per-thread array indexed only by constants stays in registers on a GPU.)"""
    if n == 3:
        return hits[0, 1], hits[1, 1]
    mx = 0.5 * (hits[0, n - 1] + hits[0, 0])
    my = 0.5 * (hits[1, n - 1] + hits[1, 0])
    h = n // 2
    d1 = (hits[0, h] - mx) * (hits[0, h] - mx) + (hits[1, h] - my) * (hits[1, h] - my)
    d2 = (hits[0, h - 1] - mx) * (hits[0, h - 1] - mx) + (hits[1, h - 1] - my) * (hits[1, h - 1] - my)
    if d1 < d2:
        return hits[0, h], hits[1, h]
    return hits[0, h - 1], hits[1, h - 1]


@pk.device_function
def fast_fit(acc, hits, ff, n):
    """CMSSW's ``fastFit``: ``ff`` = the centre X0, Y0, the radius and tan(theta) of the pre-fit
    helix."""
    mid_x, mid_y = middle_hit(acc, hits, n)
    ax = mid_x - hits[0, 0]
    ay = mid_y - hits[1, 0]
    bx = hits[0, n - 1] - mid_x
    by = hits[1, n - 1] - mid_y
    cx = hits[0, 0] - hits[0, n - 1]
    cy = hits[1, 0] - hits[1, n - 1]
    a2 = ax * ax + ay * ay
    b2 = bx * bx + by * by
    c2 = cx * cx + cy * cy
    tmp = 0.5 / (cx * ay - cy * ax)
    x0 = hits[0, 0] - (ay * c2 + cy * a2) * tmp
    y0 = hits[1, 0] + (ax * c2 + cx * a2) * tmp
    radius = math.sqrt(a2 * b2 * c2) / (2.0 * abs(bx * ay - by * ax))
    dx = hits[0, 0] - x0
    dy = hits[1, 0] - y0
    ex = hits[0, n - 1] - x0
    ey = hits[1, n - 1] - y0
    ff[0] = x0
    ff[1] = y0
    ff[2] = radius
    ff[3] = radius * math.atan2(dx * ey - dy * ex, dx * ex + dy * ey) / (hits[2, n - 1] - hits[2, 0])


@pk.device_function
def prepare_broken_line_data(acc, hits, ff, b_field, radii, s_tr, s_tot, z_sz, vb, n):
    """CMSSW's ``prepareBrokenLineData``: fills the radii, arc lengths, s-z coordinates and kink
    variances; returns the charge."""
    x0 = ff[0]
    y0 = ff[1]
    radius = ff[2]
    mid_x, mid_y = middle_hit(acc, hits, n)
    cross = (mid_x - hits[0, 0]) * (hits[1, n - 1] - mid_y) - (mid_y - hits[1, 0]) * (hits[0, n - 1] - mid_x)
    q = -1.0 if cross > 0 else 1.0
    slope = -q / ff[3]
    c, s = rotation(acc, slope)
    norm0 = math.sqrt(x0 * x0 + y0 * y0)
    ex = -radius * x0 / norm0
    ey = -radius * y0 / norm0
    for i in range(n):
        radii[0, i] = hits[0, i] - x0
        radii[1, i] = hits[1, i] - y0
        dx = radii[0, i]
        dy = radii[1, i]
        s_tr[i] = q * radius * math.atan2(dx * ey - dy * ex, dx * ex + dy * ey)
        s_tot[i] = c * s_tr[i] + s * hits[2, i]
        z_sz[i] = -s * s_tr[i] + c * hits[2, i]
    vb[0] = 0.0
    vb[n - 1] = 0.0
    for i in range(1, n - 1):
        vb[i] = mult_scatt(acc, s_tot[i + 1] - s_tot[i], b_field, radius, slope) + mult_scatt(
            acc, s_tot[i] - s_tot[i - 1], b_field, radius, slope
        )
    return q


@pk.device_function
def matrix_c_u(acc, cm, w, s, vb, n):
    """CMSSW's ``matrixC_u``: the band matrix of the normal equations in the offsets u, in the
    top-left n x n of ``cm``."""
    pk.linalg.set_zero(acc, cm, n, n)
    for i in range(n):
        cm[i, i] = w[i]
        if i > 1:
            cm[i, i] += 1.0 / (vb[i - 1] * ((s[i] - s[i - 1]) * (s[i] - s[i - 1])))
        if 0 < i and i < n - 1:
            f = (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
            cm[i, i] += (1.0 / vb[i]) * (f * f)
            cm[i, i + 1] = 1.0 / (vb[i] * (s[i + 1] - s[i])) * (-f)
        if i < n - 2:
            cm[i, i] += 1.0 / (vb[i + 1] * ((s[i + 1] - s[i]) * (s[i + 1] - s[i])))
            g = (s[i + 2] - s[i]) / ((s[i + 2] - s[i + 1]) * (s[i + 1] - s[i]))
            cm[i, i + 1] += 1.0 / (vb[i + 1] * (s[i + 1] - s[i])) * (-g)
            cm[i, i + 2] = 1.0 / (vb[i + 1] * (s[i + 2] - s[i + 1]) * (s[i + 1] - s[i]))
        cm[i, i] *= 0.5
    for i in range(n):
        for j in range(i + 1):
            cm[i, j] = cm[i, j] + cm[j, i]
            cm[j, i] = cm[i, j]


@pk.device_function
def kink_chi2(acc, u, s, vb, curvature, n):
    """The kink terms of a Broken Line chi2 (``curvature``: the circle's correction u[n], or 0)."""
    chi2 = 0.0
    for i in range(1, n - 1):
        r = (
            u[i - 1] / (s[i] - s[i - 1])
            - u[i] * (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
            + u[i + 1] / (s[i + 1] - s[i])
            + (s[i + 1] - s[i - 1]) * curvature / 2.0
        )
        chi2 += r * r / vb[i]
    return chi2


@pk.device_function
def solve_offsets(acc, cm, inv, w, z, u, rhs, m, n):
    """``inv`` = ``cm^-1`` (m x m), ``u = inv @ rhs`` with ``rhs = w * z`` on the first n rows."""
    pk.linalg.cholesky_inverse(acc, cm, inv, m)
    for i in range(m):
        rhs[i] = w[i] * z[i] if i < n else 0.0
    pk.linalg.matvec(acc, inv, rhs, u, m, m)


@pk.device_function
def line_fit(acc, ge, q, slope, radius, b_field, radii, s_tot, z_sz, vb, w, cm, inv, u, rhs, par, cov, jac, tmp, n):
    """CMSSW's ``lineFit``: ``par`` = (cot(theta), zip), ``cov`` its 2 x 2 covariance; returns
    the chi2."""
    c, s = rotation(acc, slope)
    for i in range(n):
        inv_norm = 1.0 / math.sqrt(radii[0, i] * radii[0, i] + radii[1, i] * radii[1, i])
        g0 = -s * (radii[1, i] * inv_norm)  # row 1 of rotation @ d(s, z)/d(x, y, z)
        g1 = -s * (-radii[0, i] * inv_norm)
        g2 = c
        var = (
            g0 * g0 * ge[0, i]
            + g1 * g1 * ge[2, i]
            + g2 * g2 * ge[5, i]
            + 2.0 * (g0 * g1 * ge[1, i] + g0 * g2 * ge[3, i] + g1 * g2 * ge[4, i])
        )
        w[i] = 1.0 / var
    matrix_c_u(acc, cm, w, s_tot, vb, n)
    solve_offsets(acc, cm, inv, w, z_sz, u, rhs, n, n)
    ds = s_tot[1] - s_tot[0]
    par[0] = (u[1] - u[0]) / ds
    par[1] = u[0]
    cov[0, 0] = (inv[0, 0] - 2.0 * inv[0, 1] + inv[1, 1]) / (ds * ds) + mult_scatt(acc, ds, b_field, radius, slope)
    cov[0, 1] = (inv[0, 1] - inv[0, 0]) / ds
    cov[1, 0] = cov[0, 1]
    cov[1, 1] = inv[0, 0]
    # to the original s origin, then turned back to the s-z axes
    jac[0, 0] = 1.0
    jac[0, 1] = 0.0
    jac[1, 0] = -s_tot[0]
    jac[1, 1] = 1.0
    par[1] += -par[0] * s_tot[0]
    pk.linalg.similarity(acc, jac, cov, tmp, 2, 2)
    j11 = 1.0 / (c - par[0] * s)
    jac[0, 0] = j11 * j11
    jac[0, 1] = 0.0
    jac[1, 0] = par[1] * s * jac[0, 0]
    jac[1, 1] = j11
    par[1] = par[1] * j11
    par[0] = (s + par[0] * c) * j11
    pk.linalg.similarity(acc, jac, tmp, cov, 2, 2)
    chi2 = 0.0
    for i in range(n):
        chi2 += w[i] * ((z_sz[i] - u[i]) * (z_sz[i] - u[i]))
    return chi2 + kink_chi2(acc, u, s_tot, vb, 0.0, n)


@pk.device_function
def translate_karimaki(acc, par, cov, x0, y0, jac, tmp):
    """Karimaki's circle parameters (phi, d, rho) and their covariance moved to an origin at
    ``(x0, y0)`` of the old system (Karimaki, NIM A305 (1991) 187)."""
    sin_phi = math.sin(par[0])
    cos_phi = math.cos(par[0])
    d = par[1]
    rho = par[2]
    para = x0 * cos_phi + y0 * sin_phi
    orth = x0 * sin_phi - y0 * cos_phi + d
    small_u = 1.0 + rho * d
    cc = -rho * y0 + small_u * cos_phi
    bb = rho * x0 + small_u * sin_phi
    aa = 2.0 * orth + rho * (orth * orth + para * para)
    big_u = math.sqrt(1.0 + rho * aa)
    xi = 1.0 / (bb * bb + cc * cc)
    v = 1.0 + rho * orth
    lam = (0.5 * aa) / ((1.0 + big_u) * (1.0 + big_u) * big_u)
    mu = 1.0 / (big_u * (1.0 + big_u)) + rho * lam
    zeta = orth * orth + para * para
    jac[0, 0] = xi * small_u * v
    jac[0, 1] = -xi * rho * rho * orth
    jac[0, 2] = xi * para
    jac[1, 0] = 2.0 * mu * small_u * para
    jac[1, 1] = 2.0 * mu * v
    jac[1, 2] = mu * zeta - lam * aa
    jac[2, 0] = 0.0
    jac[2, 1] = 0.0
    jac[2, 2] = 1.0
    par[0] = math.atan2(bb, cc)
    par[1] = aa / (1.0 + big_u)
    pk.linalg.similarity(acc, jac, cov, tmp, 3, 3)
    pk.linalg.copy(acc, tmp, cov, 3, 3)


@pk.device_function
def circle_border(acc, cm, s, vb, n):
    """Row and column n of the circle fit's matrix: the curvature correction's terms."""
    cm[n, n] = 0.0
    for i in range(n):
        b = 0.0
        if 0 < i and i < n - 1:
            b += -((s[i + 1] - s[i - 1]) * (s[i + 1] - s[i - 1])) / (
                2.0 * vb[i] * (s[i + 1] - s[i]) * (s[i] - s[i - 1])
            )
            cm[n, n] += (s[i + 1] - s[i - 1]) * (s[i + 1] - s[i - 1]) / (4.0 * vb[i])
        if i > 1:
            b += (s[i] - s[i - 2]) / (2.0 * vb[i - 1] * (s[i] - s[i - 1]))
        if i < n - 2:
            b += (s[i + 2] - s[i]) / (2.0 * vb[i + 1] * (s[i + 1] - s[i]))
        cm[i, n] = b
        cm[n, i] = b


@pk.device_function
def circle_fit(
    acc, hits, ge, q, slope, radius, b_field, radii, s_tr, s_tot, z_sz, vb, w, cm, inv, u, rhs, par, cov, jac, tmp, n
):
    """CMSSW's ``circleFit``: ``par`` = (phi, d, rho), ``cov`` its 3 x 3 covariance; returns the
    chi2. Overwrites ``vb`` (projected) and ``z_sz`` (the hits' distance to the pre-fit circle)."""
    proj = 1.0 + slope * slope
    for i in range(n):
        vb[i] *= proj  # the kink angles are projected
        z_sz[i] = math.sqrt(radii[0, i] * radii[0, i] + radii[1, i] * radii[1, i]) - radius
        k0, k1 = rotation(acc, -radii[0, i] / radii[1, i])  # its row 1: (-k1, k0)
        w[i] = 1.0 / (k1 * k1 * ge[0, i] - 2.0 * k1 * k0 * ge[1, i] + k0 * k0 * ge[2, i])
    matrix_c_u(acc, cm, w, s_tr, vb, n)
    circle_border(acc, cm, s_tr, vb, n)
    solve_offsets(acc, cm, inv, w, z_sz, u, rhs, n + 1, n)
    n0 = math.sqrt(radii[0, 0] * radii[0, 0] + radii[1, 0] * radii[1, 0])
    n1 = math.sqrt(radii[0, 1] * radii[0, 1] + radii[1, 1] * radii[1, 1])
    rx0 = radii[0, 0] / n0
    ry0 = radii[1, 0] / n0
    rx1 = radii[0, 1] / n1
    ry1 = radii[1, 1] / n1
    dx = hits[0, 0] + (u[0] - z_sz[0]) * rx0
    dy = hits[1, 0] + (u[0] - z_sz[0]) * ry0
    emx = hits[0, 1] + (u[1] - z_sz[1]) * rx1 - dx
    emy = hits[1, 1] + (u[1] - z_sz[1]) * ry1 - dy
    em2 = emx * emx + emy * emy
    tmp1 = 1.0 / em2
    tmp2 = math.sqrt(radius * radius - 0.25 * em2)
    par[0] = math.atan2(emy, emx)
    par[1] = q * (tmp2 - radius)
    par[2] = q * (1.0 / radius + u[n])
    tmp2 = 1.0 / tmp2
    pk.linalg.set_zero(acc, jac, 3, 3)
    jac[0, 0] = (ry0 * emx - emy * rx0) * tmp1
    jac[0, 1] = (ry1 * emx - emy * rx1) * tmp1
    jac[1, 0] = q * (emx * rx0 + emy * ry0) * tmp2
    jac[1, 1] = q * (emx * rx1 + emy * ry1) * tmp2
    jac[2, 2] = q
    for i in range(3):  # the covariance of u[0], u[1] and the curvature correction u[n]
        for j in range(3):
            tmp[i, j] = inv[i if i < 2 else n, j if j < 2 else n]
    pk.linalg.similarity(acc, jac, tmp, cov, 3, 3)
    # to the first corrected hit, adding the scattering before it, and back to the original origin
    translate_karimaki(acc, par, cov, 0.5 * emx, 0.5 * emy, jac, tmp)
    cov[0, 0] += proj * mult_scatt(acc, s_tot[1] - s_tot[0], b_field, radius, slope)
    translate_karimaki(acc, par, cov, dx, dy, jac, tmp)
    chi2 = 0.0
    for i in range(n):
        chi2 += w[i] * ((z_sz[i] - u[i]) * (z_sz[i] - u[i]))
    return chi2 + kink_chi2(acc, u, s_tr, vb, u[n], n)


@pk.device_function
def store_track(acc, tracks, t, cpar, ccov, lpar, lcov, chi2, q, b_field, n):
    """CMSSW's ``copyFromCircle`` (the state and the packed covariance, charge / pt scaled by
    1 / B), pt, eta and the chi2 over 2n - 5 degrees of freedom."""
    scale = 1.0 / b_field
    tracks.state[t, 0] = cpar[0]
    tracks.state[t, 1] = cpar[1]
    tracks.state[t, 2] = cpar[2] * scale
    tracks.state[t, 3] = lpar[0]
    tracks.state[t, 4] = lpar[1]
    for k in range(15):
        tracks.covariance[t, k] = 0.0
    tracks.covariance[t, 0] = ccov[0, 0]
    tracks.covariance[t, 1] = ccov[0, 1]
    tracks.covariance[t, 2] = scale * ccov[0, 2]
    tracks.covariance[t, 5] = ccov[1, 1]
    tracks.covariance[t, 6] = scale * ccov[1, 2]
    tracks.covariance[t, 9] = scale * scale * ccov[2, 2]
    tracks.covariance[t, 12] = lcov[0, 0]
    tracks.covariance[t, 13] = lcov[0, 1]
    tracks.covariance[t, 14] = lcov[1, 1]
    tracks.pt[t] = b_field / abs(cpar[2])
    tracks.eta[t] = math.asinh(lpar[0])
    tracks.chi2[t] = chi2 / (2 * n - 5)
    tracks.charge[t] = q


# ----------------------------------------------------------------------------- the fit kernel, one per hit count


@functools.cache
def bl_fit_kernel(n_hits: int):
    """The fit kernel of tracks of ``n_hits`` hits (CMSSW's ``Kernel_BLFastFit<N>`` and
    ``Kernel_BLFit<N>`` in one): one track per thread, tracks ``tkids[offsets[N]:offsets[N + 1]]``."""
    N = n_hits  # a constant of the kernel: the shapes of its per-thread arrays

    @pk.kernel
    def bl_fit(acc, hits_in, tracks, offsets, tkids, b_field):
        hits = acc.local_array((3, N), np.float64)
        ge = acc.local_array((6, N), np.float64)
        ff = acc.local_array(4, np.float64)
        radii = acc.local_array((2, N), np.float64)
        s_tr = acc.local_array(N, np.float64)
        s_tot = acc.local_array(N, np.float64)
        z_sz = acc.local_array(N, np.float64)
        vb = acc.local_array(N, np.float64)
        w = acc.local_array(N, np.float64)
        cm = acc.local_array((N + 1, N + 1), np.float64)
        inv = acc.local_array((N + 1, N + 1), np.float64)
        u = acc.local_array(N + 1, np.float64)
        rhs = acc.local_array(N + 1, np.float64)
        cpar = acc.local_array(3, np.float64)
        ccov = acc.local_array((3, 3), np.float64)
        lpar = acc.local_array(2, np.float64)
        lcov = acc.local_array((2, 2), np.float64)
        jac = acc.local_array((3, 3), np.float64)
        tmp = acc.local_array((3, 3), np.float64)
        for k in acc.uniform_elements(offsets[N], offsets[N + 1]):
            t = tkids[k]
            for i in range(N):
                for r in range(3):
                    hits[r, i] = hits_in.xyz[t, r, i]
                for r in range(6):
                    ge[r, i] = hits_in.ge[t, r, i]
            fast_fit(acc, hits, ff, N)
            q = prepare_broken_line_data(acc, hits, ff, b_field, radii, s_tr, s_tot, z_sz, vb, N)
            slope = -q / ff[3]
            radius = ff[2]
            lchi2 = line_fit(
                acc, ge, q, slope, radius, b_field, radii, s_tot, z_sz, vb, w, cm, inv, u, rhs, lpar, lcov, jac, tmp, N
            )
            cchi2 = circle_fit(
                acc, hits, ge, q, slope, radius, b_field, radii, s_tr, s_tot, z_sz, vb, w, cm, inv, u, rhs, cpar,
                ccov, jac, tmp, N,
            )  # fmt: skip
            store_track(acc, tracks, t, cpar, ccov, lpar, lcov, cchi2 + lchi2, q, b_field, N)

    bl_fit.__name__ = bl_fit.__qualname__ = f"bl_fit_{N}"
    return bl_fit


# ----------------------------------------------------------------------------- host side


@functools.lru_cache(maxsize=64)
def _workdiv(device, n_tracks: int) -> pk.WorkDiv:
    return pk.make_workdiv(device, max(1, -(-n_tracks // BLOCK)), BLOCK)


def fit_tracks(queue, n_hits, hits, tracks, b_field=reference.B_FIELD, scratch=None):
    """Fit every track of the ``hits`` collection (``n_hits``: a Buffer of their hit counts,
    3 to 5) into the ``tracks`` collection, on ``queue`` (asynchronous): the tracks are grouped by
    hit count (``pk.tools.one_to_many``: CMSSW's tupleMultiplicity), then one launch per count.
    ``scratch``: the grouping's ``(offsets, tkids)`` Buffers, reused (new ones when None)."""
    n = len(n_hits)
    offsets, tkids = pk.tools.one_to_many(queue, n_hits, MAX_HITS + 1, out=scratch)
    wd = _workdiv(queue.device, n)
    for count in range(3, MAX_HITS + 1):
        pk.exec(queue, wd, bl_fit_kernel(count), hits.const_view(), tracks.view(), offsets, tkids, b_field)
    return offsets, tkids


def upload_tracks(queue, generated: dict):
    """``(n_hits Buffer, Hits collection)`` of :func:`reference.generate_tracks`' tracks on the
    queue's device."""
    n = len(generated["n_hits"])
    n_hits = pk.Buffer(queue.device, n, np.int32)
    pk.memcpy(queue, n_hits, generated["n_hits"])
    hits = pk.PortableCollection.from_dict(Hits, {"xyz": generated["hits"], "ge": generated["hits_ge"]}, queue)
    return n_hits, hits


def download_tracks(queue, tracks) -> dict:
    """The fit's output as numpy arrays (waits for the queue)."""
    host = tracks.to_host(queue)
    queue.wait()
    return {k: np.array(getattr(host, k)) for k in ("state", "covariance", "pt", "eta", "chi2", "charge")}


def compare(got: dict, want: dict) -> dict:
    """The largest difference of each output from the reference, relative to the value or, for
    the state and covariance, to the fitted error of the entry (a difference far below an error is
    rounding): ``{name: worst}``."""
    err = np.sqrt(want["covariance"][:, [0, 5, 9, 12, 14]])
    diag = err[:, [r for r, _ in reference.PACKED]] * err[:, [c for _, c in reference.PACKED]]
    out = {
        "state": float(np.max(np.abs(got["state"] - want["state"]) / err)),
        "covariance": float(np.max(np.abs(got["covariance"] - want["covariance"]) / diag)),
    }
    for key in ("pt", "eta", "chi2"):
        out[key] = float(np.max(np.abs(got[key] - want[key]) / np.maximum(np.abs(want[key]), 1e-300)))
    out["charge"] = float(np.count_nonzero(got["charge"] != want["charge"]))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    backend_argument(parser)
    parser.add_argument("--tracks", type=at_least(1), default=10000)
    parser.add_argument("--seed", type=at_least(0), default=1, help="numpy's random seed (0 or more)")
    parser.add_argument("--repeats", type=at_least(1), default=3)
    args = parser.parse_args(argv)
    device = pk.device(args.backend)
    queue = pk.Queue(device)
    generated = reference.generate_tracks(args.tracks, args.seed)
    n_hits, hits = upload_tracks(queue, generated)
    tracks = pk.PortableCollection(Tracks, args.tracks, queue)
    scratch = fit_tracks(queue, n_hits, hits, tracks)  # compiles the three kernels
    queue.wait()
    best = math.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        fit_tracks(queue, n_hits, hits, tracks, scratch=scratch)
        queue.wait()
        best = min(best, time.perf_counter() - t0)
    got = download_tracks(queue, tracks)
    worst = compare(got, reference.reference_fit_all(generated))
    print(f"Broken Line fit of {args.tracks} tracks (3-5 hits) on {device}: {best * 1e3:.2f} ms")
    print("largest difference from the numpy reference: " + ", ".join(f"{k} {v:.2g}" for k, v in worst.items()))
    ok = worst["charge"] == 0 and max(worst["state"], worst["covariance"]) < 1e-6
    ok = ok and max(worst["pt"], worst["eta"], worst["chi2"]) < 1e-6
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_script(main))
