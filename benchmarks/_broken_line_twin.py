"""The numba twin of the Broken Line fit port (examples/broken_line_fit.py): CMSSW's fit written
as a numba user writes it, one ``@njit`` loop over the tracks, one track per iteration, scratch
arrays allocated once before the loop, CMSSW's Cholesky inversion by hand (numba's
``np.linalg.inv`` calls LAPACK and allocates per call: slower on 4x4 to 6x6 matrices).

``numba_broken_line(n_hits, hits, hits_ge, b_field, state, covariance, pt, eta, chi2, charge)``
takes the arrays of examples/broken_line_reference.py's ``generate_tracks`` and fills the outputs
as the port and the reference do.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

MAX_HITS = 5


@njit(cache=True, inline="always")
def _mult_scatt(length, b_field, radius, slope):  # pragma: no cover - compiled
    pt = min(50.0, b_field * radius)
    x = abs(length) * (0.06 / 16.0)
    f = 1.0 + 0.038 * math.log(x)
    return 0.7 * (13.6 / 1000.0) ** 2 / (pt * pt * (1.0 + slope * slope)) * x * (f * f)


@njit(cache=True, inline="always")
def _cholesky_invert(m, out, n):  # pragma: no cover - compiled
    """``out`` = inverse of the symmetric positive definite ``m[:n, :n]`` (factor, invert the
    factor, multiply its transpose by it)."""
    for i in range(n):
        for j in range(i + 1):
            out[i, j] = m[i, j]
    for j in range(n):
        d = out[j, j]
        for k in range(j):
            d -= out[j, k] * out[j, k]
        d = math.sqrt(d)
        out[j, j] = d
        for i in range(j + 1, n):
            s = out[i, j]
            for k in range(j):
                s -= out[i, k] * out[j, k]
            out[i, j] = s / d
    for j in range(n):
        out[j, j] = 1.0 / out[j, j]
        for i in range(j + 1, n):
            s = 0.0
            for k in range(j, i):
                s -= out[i, k] * out[k, j]
            out[i, j] = s / out[i, i]
    for i in range(n):
        for j in range(i + 1):
            s = 0.0
            for k in range(i, n):
                s += out[k, i] * out[k, j]
            out[i, j] = s
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i]


@njit(cache=True, inline="always")
def _matrix_c_u(c, w, s, vb, n):  # pragma: no cover - compiled
    for i in range(n):
        for j in range(n):
            c[i, j] = 0.0
    for i in range(n):
        c[i, i] = w[i]
        if i > 1:
            c[i, i] += 1.0 / (vb[i - 1] * (s[i] - s[i - 1]) ** 2)
        if 0 < i < n - 1:
            c[i, i] += (1.0 / vb[i]) * ((s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))) ** 2
            c[i, i + 1] = (
                1.0 / (vb[i] * (s[i + 1] - s[i])) * (-(s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1])))
            )
        if i < n - 2:
            c[i, i] += 1.0 / (vb[i + 1] * (s[i + 1] - s[i]) ** 2)
            c[i, i + 1] += (
                1.0
                / (vb[i + 1] * (s[i + 1] - s[i]))
                * (-(s[i + 2] - s[i]) / ((s[i + 2] - s[i + 1]) * (s[i + 1] - s[i])))
            )
            c[i, i + 2] = 1.0 / (vb[i + 1] * (s[i + 2] - s[i + 1]) * (s[i + 1] - s[i]))
        c[i, i] *= 0.5
    for i in range(n):
        for j in range(i + 1):
            c[i, j] = c[i, j] + c[j, i]
            c[j, i] = c[i, j]


@njit(cache=True, inline="always")
def _sandwich3(jac, cov, tmp):  # pragma: no cover - compiled
    """cov = jac @ cov @ jac.T for 3x3 matrices (``tmp``: scratch)."""
    for i in range(3):
        for j in range(3):
            s = 0.0
            for k in range(3):
                s += jac[i, k] * cov[k, j]
            tmp[i, j] = s
    for i in range(3):
        for j in range(3):
            s = 0.0
            for k in range(3):
                s += tmp[i, k] * jac[j, k]
            cov[i, j] = s


@njit(cache=True, inline="always")
def _translate_karimaki(par, cov, x0, y0, jac, tmp):  # pragma: no cover - compiled
    phi, d, rho = par[0], par[1], par[2]
    sin_phi, cos_phi = math.sin(phi), math.cos(phi)
    para = x0 * cos_phi + y0 * sin_phi
    orth = x0 * sin_phi - y0 * cos_phi + d
    small_u = 1.0 + rho * d
    c = -rho * y0 + small_u * cos_phi
    b = rho * x0 + small_u * sin_phi
    a = 2.0 * orth + rho * (orth * orth + para * para)
    big_u = math.sqrt(1.0 + rho * a)
    xi = 1.0 / (b * b + c * c)
    v = 1.0 + rho * orth
    lam = (0.5 * a) / ((1.0 + big_u) * (1.0 + big_u) * big_u)
    mu = 1.0 / (big_u * (1.0 + big_u)) + rho * lam
    zeta = orth * orth + para * para
    jac[0, 0] = xi * small_u * v
    jac[0, 1] = -xi * rho * rho * orth
    jac[0, 2] = xi * para
    jac[1, 0] = 2.0 * mu * small_u * para
    jac[1, 1] = 2.0 * mu * v
    jac[1, 2] = mu * zeta - lam * a
    jac[2, 0] = 0.0
    jac[2, 1] = 0.0
    jac[2, 2] = 1.0
    par[0] = math.atan2(b, c)
    par[1] = a / (1.0 + big_u)
    _sandwich3(jac, cov, tmp)


@njit(cache=True)
def numba_broken_line(
    n_hits, hits, hits_ge, b_field, state, covariance, pt, eta, chi2, charge
):  # pragma: no cover - compiled
    """Fit every track (``hits``: (T, 3, MAX_HITS), ``hits_ge``: (T, 6, MAX_HITS) float32)."""
    m = MAX_HITS + 1
    c = np.empty((m, m))
    inv = np.empty((m, m))
    radii = np.empty((2, MAX_HITS))
    s_tr = np.empty(MAX_HITS)
    s_tot = np.empty(MAX_HITS)
    z_sz = np.empty(MAX_HITS)
    vb = np.empty(MAX_HITS)
    w = np.empty(MAX_HITS)
    u = np.empty(m)
    cpar = np.empty(3)
    ccov = np.empty((3, 3))
    jac = np.empty((3, 3))
    tmp = np.empty((3, 3))
    for t in range(n_hits.size):
        n = n_hits[t]
        h = hits[t]
        ge = hits_ge[t]
        # --- fastFit: the circle through the first, a middle and the last hit
        mid = 1
        if n > 3:
            mx = 0.5 * (h[0, n - 1] + h[0, 0])
            my = 0.5 * (h[1, n - 1] + h[1, 0])
            d1 = (h[0, n // 2] - mx) ** 2 + (h[1, n // 2] - my) ** 2
            d2 = (h[0, n // 2 - 1] - mx) ** 2 + (h[1, n // 2 - 1] - my) ** 2
            mid = n // 2 if d1 < d2 else n // 2 - 1
        ax, ay = h[0, mid] - h[0, 0], h[1, mid] - h[1, 0]
        bx, by = h[0, n - 1] - h[0, mid], h[1, n - 1] - h[1, mid]
        cx, cy = h[0, 0] - h[0, n - 1], h[1, 0] - h[1, n - 1]
        a2, b2, c2 = ax * ax + ay * ay, bx * bx + by * by, cx * cx + cy * cy
        tmp_c = 0.5 / (cx * ay - cy * ax)
        x0 = h[0, 0] - (ay * c2 + cy * a2) * tmp_c
        y0 = h[1, 0] + (ax * c2 + cx * a2) * tmp_c
        radius = math.sqrt(a2 * b2 * c2) / (2.0 * abs(bx * ay - by * ax))
        dx, dy = h[0, 0] - x0, h[1, 0] - y0
        ex, ey = h[0, n - 1] - x0, h[1, n - 1] - y0
        tan_theta = radius * math.atan2(dx * ey - dy * ex, dx * ex + dy * ey) / (h[2, n - 1] - h[2, 0])
        # --- prepareBrokenLineData
        q = -1.0 if ax * by - ay * bx > 0 else 1.0
        slope = -q / tan_theta
        r00 = 1.0 / math.sqrt(1.0 + slope * slope)
        r01 = slope * r00
        norm0 = math.sqrt(x0 * x0 + y0 * y0)
        ex, ey = -radius * x0 / norm0, -radius * y0 / norm0
        for i in range(n):
            radii[0, i] = h[0, i] - x0
            radii[1, i] = h[1, i] - y0
            dx, dy = radii[0, i], radii[1, i]
            s_tr[i] = q * radius * math.atan2(dx * ey - dy * ex, dx * ex + dy * ey)
            s_tot[i] = r00 * s_tr[i] + r01 * h[2, i]
            z_sz[i] = -r01 * s_tr[i] + r00 * h[2, i]
        vb[0] = 0.0
        vb[n - 1] = 0.0
        for i in range(1, n - 1):
            vb[i] = _mult_scatt(s_tot[i + 1] - s_tot[i], b_field, radius, slope) + _mult_scatt(
                s_tot[i] - s_tot[i - 1], b_field, radius, slope
            )
        lp0, lp1, l00, l01, l11, lchi2 = _line_fit(ge, radii, s_tot, z_sz, vb, w, c, inv, u, n, b_field, radius, slope)
        cchi2 = _circle_fit(
            h, ge, radii, s_tr, s_tot, z_sz, vb, w, c, inv, u, cpar, ccov, jac, tmp, n, b_field, radius, slope, q
        )
        _store(
            t,
            cpar,
            ccov,
            lp0,
            lp1,
            l00,
            l01,
            l11,
            cchi2 + lchi2,
            n,
            q,
            b_field,
            state,
            covariance,
            pt,
            eta,
            chi2,
            charge,
        )


@njit(cache=True, inline="always")
def _line_fit(ge, radii, s_tot, z_sz, vb, w, c, inv, u, n, b_field, radius, slope):  # pragma: no cover - compiled
    """CMSSW's lineFit: ``(cot(theta), zip, cov00, cov01, cov11, chi2)``."""
    r00 = 1.0 / math.sqrt(1.0 + slope * slope)
    r01 = slope * r00
    for i in range(n):
        inv_norm = 1.0 / math.sqrt(radii[0, i] ** 2 + radii[1, i] ** 2)
        j0, j1 = radii[1, i] * inv_norm, -radii[0, i] * inv_norm
        # row 1 of rot @ jac: (-r01 * j0, -r01 * j1, r00)
        g0, g1, g2 = -r01 * j0, -r01 * j1, r00
        var = (
            g0 * g0 * ge[0, i]
            + g1 * g1 * ge[2, i]
            + g2 * g2 * ge[5, i]
            + 2.0 * (g0 * g1 * ge[1, i] + g0 * g2 * ge[3, i] + g1 * g2 * ge[4, i])
        )
        w[i] = 1.0 / var
    _matrix_c_u(c, w, s_tot, vb, n)
    _cholesky_invert(c, inv, n)
    for i in range(n):
        acc = 0.0
        for k in range(n):
            acc += inv[i, k] * (w[k] * z_sz[k])
        u[i] = acc
    ds = s_tot[1] - s_tot[0]
    lp0 = (u[1] - u[0]) / ds
    lp1 = u[0]
    l00 = (inv[0, 0] - 2.0 * inv[0, 1] + inv[1, 1]) / (ds * ds) + _mult_scatt(ds, b_field, radius, slope)
    l01 = (inv[0, 1] - inv[0, 0]) / ds
    l11 = inv[0, 0]
    # to the original s origin: jac = [[1, 0], [-s0, 1]]
    s0 = s_tot[0]
    lp1 -= lp0 * s0
    l11, l01 = l11 - 2.0 * s0 * l01 + s0 * s0 * l00, l01 - s0 * l00
    # rotated back to the s-z axes
    j11 = 1.0 / (r00 - lp0 * r01)
    j00 = j11 * j11
    j10 = lp1 * r01 * j00
    lp1 = lp1 * j11
    lp0 = (r01 + lp0 * r00) * j11
    l11, l01, l00 = (
        j10 * j10 * l00 + 2.0 * j10 * j11 * l01 + j11 * j11 * l11,
        j00 * (j10 * l00 + j11 * l01),
        j00 * j00 * l00,
    )
    lchi2 = 0.0
    for i in range(n):
        lchi2 += w[i] * (z_sz[i] - u[i]) ** 2
    for i in range(1, n - 1):
        r = (
            u[i - 1] / (s_tot[i] - s_tot[i - 1])
            - u[i] * (s_tot[i + 1] - s_tot[i - 1]) / ((s_tot[i + 1] - s_tot[i]) * (s_tot[i] - s_tot[i - 1]))
            + u[i + 1] / (s_tot[i + 1] - s_tot[i])
        )
        lchi2 += r * r / vb[i]
    return lp0, lp1, l00, l01, l11, lchi2


@njit(cache=True, inline="always")
def _circle_fit(
    h, ge, radii, s_tr, s_tot, z_sz, vb, w, c, inv, u, cpar, ccov, jac, tmp, n, b_field, radius, slope, q
):  # pragma: no cover - compiled
    """CMSSW's circleFit, with the curvature correction u[n]: fills ``cpar``, ``ccov``; the chi2."""
    proj = 1.0 + slope * slope
    for i in range(n):
        vb[i] *= proj
        z_sz[i] = math.sqrt(radii[0, i] ** 2 + radii[1, i] ** 2) - radius
        sl = -radii[0, i] / radii[1, i]
        k0 = 1.0 / math.sqrt(1.0 + sl * sl)
        k1 = sl * k0  # row 1 of the rotation: (-k1, k0)
        w[i] = 1.0 / (k1 * k1 * ge[0, i] - 2.0 * k1 * k0 * ge[1, i] + k0 * k0 * ge[2, i])
    _matrix_c_u(c, w, s_tr, vb, n)
    c[n, n] = 0.0
    for i in range(n):
        b = 0.0
        if 0 < i < n - 1:
            b += -((s_tr[i + 1] - s_tr[i - 1]) ** 2) / (2.0 * vb[i] * (s_tr[i + 1] - s_tr[i]) * (s_tr[i] - s_tr[i - 1]))
            c[n, n] += (s_tr[i + 1] - s_tr[i - 1]) ** 2 / (4.0 * vb[i])
        if i > 1:
            b += (s_tr[i] - s_tr[i - 2]) / (2.0 * vb[i - 1] * (s_tr[i] - s_tr[i - 1]))
        if i < n - 2:
            b += (s_tr[i + 2] - s_tr[i]) / (2.0 * vb[i + 1] * (s_tr[i + 1] - s_tr[i]))
        c[i, n] = b
        c[n, i] = b
    _cholesky_invert(c, inv, n + 1)
    for i in range(n + 1):
        acc = 0.0
        for k in range(n):
            acc += inv[i, k] * (w[k] * z_sz[k])
        u[i] = acc
    n0 = math.sqrt(radii[0, 0] ** 2 + radii[1, 0] ** 2)
    n1 = math.sqrt(radii[0, 1] ** 2 + radii[1, 1] ** 2)
    rx0, ry0, rx1, ry1 = radii[0, 0] / n0, radii[1, 0] / n0, radii[0, 1] / n1, radii[1, 1] / n1
    dx = h[0, 0] + (u[0] - z_sz[0]) * rx0
    dy = h[1, 0] + (u[0] - z_sz[0]) * ry0
    emx = h[0, 1] + (u[1] - z_sz[1]) * rx1 - dx
    emy = h[1, 1] + (u[1] - z_sz[1]) * ry1 - dy
    em2 = emx * emx + emy * emy
    tmp1 = 1.0 / em2
    tmp2 = math.sqrt(radius * radius - 0.25 * em2)
    cpar[0] = math.atan2(emy, emx)
    cpar[1] = q * (tmp2 - radius)
    cpar[2] = q * (1.0 / radius + u[n])
    tmp2 = 1.0 / tmp2
    jac[0, 0] = (ry0 * emx - emy * rx0) * tmp1
    jac[0, 1] = (ry1 * emx - emy * rx1) * tmp1
    jac[0, 2] = 0.0
    jac[1, 0] = q * (emx * rx0 + emy * ry0) * tmp2
    jac[1, 1] = q * (emx * rx1 + emy * ry1) * tmp2
    jac[1, 2] = 0.0
    jac[2, 0] = 0.0
    jac[2, 1] = 0.0
    jac[2, 2] = q
    for i in range(3):
        for j in range(3):
            ccov[i, j] = inv[i if i < 2 else n, j if j < 2 else n]
    _sandwich3(jac, ccov, tmp)
    _translate_karimaki(cpar, ccov, 0.5 * emx, 0.5 * emy, jac, tmp)
    ccov[0, 0] += proj * _mult_scatt(s_tot[1] - s_tot[0], b_field, radius, slope)
    _translate_karimaki(cpar, ccov, dx, dy, jac, tmp)
    cchi2 = 0.0
    for i in range(n):
        cchi2 += w[i] * (z_sz[i] - u[i]) ** 2
    for i in range(1, n - 1):
        r = (
            u[i - 1] / (s_tr[i] - s_tr[i - 1])
            - u[i] * (s_tr[i + 1] - s_tr[i - 1]) / ((s_tr[i + 1] - s_tr[i]) * (s_tr[i] - s_tr[i - 1]))
            + u[i + 1] / (s_tr[i + 1] - s_tr[i])
            + (s_tr[i + 1] - s_tr[i - 1]) * u[n] / 2.0
        )
        cchi2 += r * r / vb[i]
    return cchi2


@njit(cache=True, inline="always")
def _store(
    t, cpar, ccov, lp0, lp1, l00, l01, l11, chi2_sum, n, q, b_field, state, covariance, pt, eta, chi2, charge
):  # pragma: no cover - compiled
    """The fit kernel's output (CMSSW's copyFromCircle, pt, eta, chi2) of track ``t``."""
    scale = 1.0 / b_field
    state[t, 0] = cpar[0]
    state[t, 1] = cpar[1]
    state[t, 2] = cpar[2] * scale
    state[t, 3] = lp0
    state[t, 4] = lp1
    cv = covariance[t]
    cv[0] = ccov[0, 0]
    cv[1] = ccov[0, 1]
    cv[2] = scale * ccov[0, 2]
    cv[3] = 0.0
    cv[4] = 0.0
    cv[5] = ccov[1, 1]
    cv[6] = scale * ccov[1, 2]
    cv[7] = 0.0
    cv[8] = 0.0
    cv[9] = scale * scale * ccov[2, 2]
    cv[10] = 0.0
    cv[11] = 0.0
    cv[12] = l00
    cv[13] = l01
    cv[14] = l11
    pt[t] = b_field / abs(cpar[2])
    eta[t] = math.asinh(lp0)
    chi2[t] = chi2_sum / (2 * n - 5)
    charge[t] = np.int8(q)
