"""Helix tracks with multiple scattering, and a numpy reference of CMSSW's Broken Line fit
(RecoTracker/PixelTrackFitting's ``brokenline`` namespace) over many tracks at once.

``generate_tracks(n_tracks, seed)`` makes charged tracks from near the beam line in a solenoid
field: each crosses up to five barrel layers, scatters in each (a Gaussian kink of the Highland
width) and leaves a hit smeared by the sensor's resolution, with the hit's global covariance
(xx, xy, yy, xz, yz, zz) in float32, as CMSSW's ``hits_ge``. Tracks get 3, 4 or 5 hits.

``reference_fit(hits, hits_ge, b_field)`` fits tracks of one hit count ``n`` (``hits``:
``(T, 3, n)``, ``hits_ge``: ``(T, 6, n)``) with the Broken Line algorithm, step by step as CMSSW:
the fast pre-fit (a circle through three hits, tan(theta) from the first and last), the data the
circle and line fits share (charge, arc lengths, the s-z rotation, the multiple-scattering kink
variances), the line fit in the s-z plane, the circle fit with the curvature correction in the
transverse plane (a (n+1) x (n+1) linear system), the Karimaki translations. It returns what
CMSSW's fit kernel writes per track: the state (phi, tip, charge / pt, cot(theta), zip), its
15 packed covariance entries, pt, eta, the reduced chi2 and the charge, all float64 (CMSSW
stores them as float32). Here the linear systems are solved by numpy's LAPACK inverse, whole
batches at a time: an independent check of the per-thread Cholesky inverse of the ports.

Run: python examples/broken_line_reference.py [--tracks N] [--seed S]
(prints the pulls of the fitted parameters against the generated ones: about 1 when the fit's
covariances describe its errors)
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

#: the solenoid's field as CMSSW's fit takes it: pt [GeV] = B_FIELD * radius [cm] (0.3 * 3.8 T)
B_FIELD = 0.0029979 * 3.8
#: radii [cm] of the barrel layers a track crosses (CMS phase-1 pixel barrel, then one more)
LAYER_RADII = (2.9, 6.8, 10.9, 16.0, 21.0)
MAX_HITS = len(LAYER_RADII)
#: the sensors' resolution [cm]: r-phi and z
SIGMA_RPHI, SIGMA_Z = 10e-4, 20e-4
#: material per layer crossed at normal incidence, in radiation lengths
X_OVER_X0 = 0.02
#: the 15 packed entries of CMSSW's track covariance: (row, column) of the 5x5 matrix
PACKED = tuple((r, c) for r in range(5) for c in range(r, 5))


# ----------------------------------------------------------------------------- generator


def _to_cylinder(x, y, phi, radius, charge, r_layer):
    """Where the circle through ``(x, y)`` with direction ``phi``, ``radius`` and ``charge`` first
    crosses the cylinder ``r_layer``: ``(x, y, direction there, arc length)``."""
    cx = x + charge * radius * np.sin(phi)  # the centre lies right of the motion for positive charge
    cy = y - charge * radius * np.cos(phi)
    dist = np.hypot(cx, cy)
    k = np.clip((dist * dist + radius * radius - r_layer * r_layer) / (2 * charge * radius * dist), -1, 1)
    gamma = np.arctan2(cy, cx)
    arc = np.full_like(x, np.inf)
    for root in (np.arcsin(k), math.pi - np.arcsin(k)):
        turn = np.mod(charge * (phi - (gamma + root)), 2 * math.pi)  # clockwise for positive charge
        arc = np.minimum(arc, radius * turn)
    end = phi - charge * arc / radius
    return cx - charge * radius * np.sin(end), cy + charge * radius * np.cos(end), end, arc


def generate_tracks(n_tracks: int, seed: int = 1, pt_range=(0.5, 20.0), max_eta=1.5) -> dict:
    """Helix tracks with multiple scattering and smeared hits: a dict of ``n_hits`` (int32,
    3-5), ``hits`` (float64, ``(T, 3, MAX_HITS)``), ``hits_ge`` (float32, ``(T, 6, MAX_HITS)``)
    and the generated parameters (``phi``, ``tip``, ``pt``, ``charge``, ``cot_theta``, ``zip``)."""
    rng = np.random.default_rng(seed)
    t = n_tracks
    charge = rng.choice(np.array([-1.0, 1.0]), t)
    pt = np.exp(rng.uniform(math.log(pt_range[0]), math.log(pt_range[1]), t))
    phi = rng.uniform(-math.pi, math.pi, t)
    cot = np.sinh(rng.uniform(-max_eta, max_eta, t))
    tip = rng.normal(0.0, 0.01, t)
    zip_ = rng.normal(0.0, 3.0, t)
    truth = {"phi": phi.copy(), "tip": tip, "pt": pt.copy(), "charge": charge, "cot_theta": cot.copy(), "zip": zip_}
    # the point of closest approach: tip is signed as CMSSW's d (positive: the origin lies left of the motion)
    x, y, z = tip * np.sin(phi), -tip * np.cos(phi), zip_.copy()
    p = pt * np.sqrt(1 + cot * cot)
    hits = np.zeros((t, 3, MAX_HITS))
    hits_ge = np.zeros((t, 6, MAX_HITS), np.float32)
    for k, r_layer in enumerate(LAYER_RADII):
        x, y, phi, arc = _to_cylinder(x, y, phi, pt / B_FIELD, charge, r_layer)
        z = z + arc * cot
        hit_phi = np.arctan2(y, x)
        along = rng.normal(0.0, SIGMA_RPHI, t)
        hits[:, 0, k] = x - along * np.sin(hit_phi)
        hits[:, 1, k] = y + along * np.cos(hit_phi)
        hits[:, 2, k] = z + rng.normal(0.0, SIGMA_Z, t)
        s2, c2 = np.sin(hit_phi), np.cos(hit_phi)
        hits_ge[:, 0, k] = SIGMA_RPHI**2 * s2 * s2
        hits_ge[:, 1, k] = -(SIGMA_RPHI**2) * s2 * c2
        hits_ge[:, 2, k] = SIGMA_RPHI**2 * c2 * c2
        hits_ge[:, 5, k] = SIGMA_Z**2
        # multiple scattering in the layer: a kink of Highland's width in two planes
        sin_theta = 1 / np.sqrt(1 + cot * cot)
        x0 = X_OVER_X0 / sin_theta
        theta0 = 13.6e-3 / p * np.sqrt(x0) * (1 + 0.038 * np.log(x0))
        phi = phi + rng.normal(0.0, 1.0, t) * theta0 / sin_theta
        theta = np.arctan2(1.0, cot) + rng.normal(0.0, 1.0, t) * theta0
        cot = 1 / np.tan(theta)
        pt = p * np.sin(theta)
    n_hits = rng.integers(3, MAX_HITS + 1, t).astype(np.int32)
    return {"n_hits": n_hits, "hits": hits, "hits_ge": hits_ge, **truth}


# ----------------------------------------------------------------------------- the fit, batched


def _cross2d(a, b):
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _middle_hit(xy):
    """CMSSW's choice of the middle hit (``xy``: ``(T, n, 2)``): 1 for 3 hits, else of the two
    central hits the one farther from the midpoint of the first and last."""
    n = xy.shape[1]
    if n == 3:
        return np.ones(len(xy), np.intp)
    middle = 0.5 * (xy[:, n - 1] + xy[:, 0])
    d1 = np.sum((xy[:, n // 2] - middle) ** 2, axis=1)
    d2 = np.sum((xy[:, n // 2 - 1] - middle) ** 2, axis=1)
    return np.where(d1 < d2, n // 2, n // 2 - 1)


def fast_fit(hits):
    """The pre-fit (CMSSW's ``fastFit``): ``(T, 4)`` of the circle's centre X0, Y0, its radius R
    and tan(theta) as ds/dz between the first and last hit."""
    xy = np.swapaxes(hits[:, :2], 1, 2)
    n, rows = xy.shape[1], np.arange(len(xy))
    mid = xy[rows, _middle_hit(xy)]
    a, b, c = mid - xy[:, 0], xy[:, n - 1] - mid, xy[:, 0] - xy[:, n - 1]
    a2, b2, c2 = np.sum(a * a, 1), np.sum(b * b, 1), np.sum(c * c, 1)
    tmp = 0.5 / _cross2d(c, a)
    out = np.empty((len(xy), 4))
    out[:, 0] = xy[:, 0, 0] - (a[:, 1] * c2 + c[:, 1] * a2) * tmp
    out[:, 1] = xy[:, 0, 1] + (a[:, 0] * c2 + c[:, 0] * a2) * tmp
    out[:, 2] = np.sqrt(a2 * b2 * c2) / (2 * np.abs(_cross2d(b, a)))
    d, e = xy[:, 0] - out[:, :2], xy[:, n - 1] - out[:, :2]
    out[:, 3] = out[:, 2] * np.arctan2(_cross2d(d, e), np.sum(d * e, 1)) / (hits[:, 2, n - 1] - hits[:, 2, 0])
    return out


def mult_scatt(length, b_field, radius, slope):
    """The variance of the planar multiple-scattering angle over ``length`` (CMSSW's ``multScatt``:
    beta = 1, pt capped at 50 GeV, 0.06/16 radiation lengths per cm, geometry factor 0.7)."""
    pt2 = np.minimum(50.0, b_field * radius) ** 2
    x = np.abs(length) * (0.06 / 16.0)
    return 0.7 * (13.6 / 1000.0) ** 2 / (pt2 * (1.0 + slope**2)) * x * (1.0 + 0.038 * np.log(x)) ** 2


def _rotation(slope):
    """The rotation taking the line y = slope * x onto y = 0: ``(T, 2, 2)``."""
    c = 1.0 / np.sqrt(1.0 + slope**2)
    return np.stack([np.stack([c, slope * c], -1), np.stack([-slope * c, c], -1)], -2)


def prepare(hits, ff, b_field):
    """CMSSW's ``prepareBrokenLineData``: charge, radii (hits less the pre-fit centre), transverse
    arc lengths, the s-z coordinates rotated onto the pre-fit line, the kink variances."""
    n = hits.shape[2]
    xy = np.swapaxes(hits[:, :2], 1, 2)
    rows = np.arange(len(xy))
    mid = xy[rows, _middle_hit(xy)]
    q = np.where(_cross2d(mid - xy[:, 0], xy[:, n - 1] - mid) > 0, -1.0, 1.0)
    slope = -q / ff[:, 3]
    rot = _rotation(slope)
    radii = hits[:, :2] - ff[:, :2, None]  # (T, 2, n)
    e = -ff[:, 2, None] * ff[:, :2] / np.linalg.norm(ff[:, :2], axis=1)[:, None]
    d = np.swapaxes(radii, 1, 2)
    s_transverse = q[:, None] * ff[:, 2, None] * np.arctan2(_cross2d(d, e[:, None]), np.sum(d * e[:, None], 2))
    sz = np.stack([s_transverse, hits[:, 2]], 1)  # (T, 2, n)
    sz = rot @ sz
    s_total, z_sz = sz[:, 0], sz[:, 1]
    var_beta = np.zeros((len(xy), n))
    for i in range(1, n - 1):
        var_beta[:, i] = mult_scatt(s_total[:, i + 1] - s_total[:, i], b_field, ff[:, 2], slope) + mult_scatt(
            s_total[:, i] - s_total[:, i - 1], b_field, ff[:, 2], slope
        )
    return {"q": q, "slope": slope, "rot": rot, "radii": radii, "s_transverse": s_transverse, "s_total": s_total,
            "z_sz": z_sz, "var_beta": var_beta}  # fmt: skip


def matrix_c_u(w, s, vb):
    """The n x n band matrix of the Broken Line's normal equations in the offsets u (CMSSW's
    ``matrixC_u``), ``(T, n, n)``."""
    t, n = w.shape
    c = np.zeros((t, n, n))
    for i in range(n):
        c[:, i, i] = w[:, i]
        if i > 1:
            c[:, i, i] += 1.0 / (vb[:, i - 1] * (s[:, i] - s[:, i - 1]) ** 2)
        if 0 < i < n - 1:
            c[:, i, i] += (1.0 / vb[:, i]) * (
                (s[:, i + 1] - s[:, i - 1]) / ((s[:, i + 1] - s[:, i]) * (s[:, i] - s[:, i - 1]))
            ) ** 2
            c[:, i, i + 1] = (
                1.0
                / (vb[:, i] * (s[:, i + 1] - s[:, i]))
                * (-(s[:, i + 1] - s[:, i - 1]) / ((s[:, i + 1] - s[:, i]) * (s[:, i] - s[:, i - 1])))
            )
        if i < n - 2:
            c[:, i, i] += 1.0 / (vb[:, i + 1] * (s[:, i + 1] - s[:, i]) ** 2)
            c[:, i, i + 1] += (
                1.0
                / (vb[:, i + 1] * (s[:, i + 1] - s[:, i]))
                * (-(s[:, i + 2] - s[:, i]) / ((s[:, i + 2] - s[:, i + 1]) * (s[:, i + 1] - s[:, i])))
            )
            c[:, i, i + 2] = 1.0 / (vb[:, i + 1] * (s[:, i + 2] - s[:, i + 1]) * (s[:, i + 1] - s[:, i]))
        c[:, i, i] *= 0.5
    return c + np.swapaxes(c, 1, 2)


def _kink_chi2(u, s, vb, curvature=None):
    """The kink terms of the chi2 (with the curvature correction ``u[n]`` for the circle)."""
    n = s.shape[1]
    out = np.zeros(len(s))
    for i in range(1, n - 1):
        r = (
            u[:, i - 1] / (s[:, i] - s[:, i - 1])
            - u[:, i] * (s[:, i + 1] - s[:, i - 1]) / ((s[:, i + 1] - s[:, i]) * (s[:, i] - s[:, i - 1]))
            + u[:, i + 1] / (s[:, i + 1] - s[:, i])
        )
        if curvature is not None:
            r = r + (s[:, i + 1] - s[:, i - 1]) * curvature / 2
        out += r**2 / vb[:, i]
    return out


def line_fit(hits_ge, ff, b_field, data):
    """The Broken Line fit in the s-z plane (CMSSW's ``lineFit``): ``(par (T, 2): cot(theta), zip;
    cov (T, 2, 2); chi2 (T,))``."""
    n = hits_ge.shape[2]
    ge = hits_ge.astype(np.float64)
    radii, s, z_sz, vb, rot = data["radii"], data["s_total"], data["z_sz"], data["var_beta"], data["rot"]
    w = np.empty((len(ge), n))
    for i in range(n):
        v = np.empty((len(ge), 3, 3))
        for (r, c), k in (((0, 0), 0), ((0, 1), 1), ((1, 1), 2), ((0, 2), 3), ((1, 2), 4), ((2, 2), 5)):
            v[:, r, c] = v[:, c, r] = ge[:, k, i]
        inv_norm = 1.0 / np.linalg.norm(radii[:, :, i], axis=1)
        jac = np.zeros((len(ge), 2, 3))
        jac[:, 0, 0] = radii[:, 1, i] * inv_norm
        jac[:, 0, 1] = -radii[:, 0, i] * inv_norm
        jac[:, 1, 2] = 1.0
        m = rot @ jac
        w[:, i] = 1.0 / (m @ v @ np.swapaxes(m, 1, 2))[:, 1, 1]
    inv = np.linalg.inv(matrix_c_u(w, s, vb))
    u = (inv @ (w * z_sz)[:, :, None])[:, :, 0]
    ds = s[:, 1] - s[:, 0]
    par = np.stack([(u[:, 1] - u[:, 0]) / ds, u[:, 0]], 1)
    cov = np.empty((len(ge), 2, 2))
    cov[:, 0, 0] = (inv[:, 0, 0] - 2 * inv[:, 0, 1] + inv[:, 1, 1]) / ds**2 + mult_scatt(
        ds, b_field, ff[:, 2], data["slope"]
    )
    cov[:, 0, 1] = cov[:, 1, 0] = (inv[:, 0, 1] - inv[:, 0, 0]) / ds
    cov[:, 1, 1] = inv[:, 0, 0]
    # back to the first hit's origin along s, then rotated back to the s-z axes
    jac = np.zeros((len(ge), 2, 2))
    jac[:, 0, 0] = jac[:, 1, 1] = 1.0
    jac[:, 1, 0] = -s[:, 0]
    par[:, 1] -= par[:, 0] * s[:, 0]
    cov = jac @ cov @ np.swapaxes(jac, 1, 2)
    j11 = 1.0 / (rot[:, 0, 0] - par[:, 0] * rot[:, 0, 1])
    jac = np.zeros((len(ge), 2, 2))
    jac[:, 1, 1] = j11
    jac[:, 0, 0] = j11 * j11
    jac[:, 1, 0] = par[:, 1] * rot[:, 0, 1] * j11 * j11
    par[:, 1] = par[:, 1] * j11
    par[:, 0] = (rot[:, 0, 1] + par[:, 0] * rot[:, 0, 0]) * j11
    cov = jac @ cov @ np.swapaxes(jac, 1, 2)
    chi2 = np.sum(w * (z_sz - u) ** 2, 1) + _kink_chi2(u, s, vb)
    return par, cov, chi2


def translate_karimaki(par, cov, x0, y0):
    """Karimaki's circle parameters (phi, d, rho) and covariance moved to an origin at ``(x0, y0)``
    of the old system (Karimaki, NIM A305 (1991) 187), in place."""
    phi, d, rho = par[:, 0], par[:, 1], par[:, 2]
    sin_phi, cos_phi = np.sin(phi), np.cos(phi)
    para = x0 * cos_phi + y0 * sin_phi
    orth = x0 * sin_phi - y0 * cos_phi + d
    small_u = 1 + rho * d
    c = -rho * y0 + small_u * cos_phi
    b = rho * x0 + small_u * sin_phi
    a = 2.0 * orth + rho * (orth**2 + para**2)
    big_u = np.sqrt(1.0 + rho * a)
    xi = 1.0 / (b**2 + c**2)
    v = 1.0 + rho * orth
    lam = (0.5 * a) / ((1.0 + big_u) ** 2 * big_u)
    mu = 1.0 / (big_u * (1.0 + big_u)) + rho * lam
    zeta = orth**2 + para**2
    jac = np.zeros((len(par), 3, 3))
    jac[:, 0] = np.stack([xi * small_u * v, -xi * rho**2 * orth, xi * para], 1)
    jac[:, 1] = np.stack([2.0 * mu * small_u * para, 2.0 * mu * v, mu * zeta - lam * a], 1)
    jac[:, 2, 2] = 1.0
    par[:, 0] = np.arctan2(b, c)
    par[:, 1] = a / (1 + big_u)
    cov[:] = jac @ cov @ np.swapaxes(jac, 1, 2)


def circle_fit(hits, hits_ge, ff, b_field, data):
    """The Broken Line fit in the transverse plane with the curvature correction (CMSSW's
    ``circleFit``): ``(par (T, 3): phi, d, rho; cov (T, 3, 3); chi2 (T,))``."""
    t, n = hits.shape[0], hits.shape[2]
    q, slope = data["q"], data["slope"]
    radii = data["radii"].copy()
    s, s_total = data["s_transverse"], data["s_total"]
    vb = data["var_beta"] * (1.0 + slope[:, None] ** 2)[:, :]  # the kink angles are projected
    z = np.linalg.norm(radii, axis=1) - ff[:, 2, None]
    ge = hits_ge.astype(np.float64)
    w = np.empty((t, n))
    for i in range(n):
        v = np.stack([np.stack([ge[:, 0, i], ge[:, 1, i]], 1), np.stack([ge[:, 1, i], ge[:, 2, i]], 1)], 1)
        rot = _rotation(-radii[:, 0, i] / radii[:, 1, i])
        w[:, i] = 1.0 / (rot @ v @ np.swapaxes(rot, 1, 2))[:, 1, 1]
    c = np.zeros((t, n + 1, n + 1))
    c[:, :n, :n] = matrix_c_u(w, s, vb)
    for i in range(n):
        if 0 < i < n - 1:
            c[:, i, n] += -((s[:, i + 1] - s[:, i - 1]) ** 2) / (
                2.0 * vb[:, i] * (s[:, i + 1] - s[:, i]) * (s[:, i] - s[:, i - 1])
            )
            c[:, n, n] += (s[:, i + 1] - s[:, i - 1]) ** 2 / (4.0 * vb[:, i])
        if i > 1:
            c[:, i, n] += (s[:, i] - s[:, i - 2]) / (2.0 * vb[:, i - 1] * (s[:, i] - s[:, i - 1]))
        if i < n - 2:
            c[:, i, n] += (s[:, i + 2] - s[:, i]) / (2.0 * vb[:, i + 1] * (s[:, i + 1] - s[:, i]))
        c[:, n, i] = c[:, i, n]
    inv = np.linalg.inv(c)
    r_u = np.zeros((t, n + 1))
    r_u[:, :n] = w * z
    u = (inv @ r_u[:, :, None])[:, :, 0]
    radii[:, :, 0] /= np.linalg.norm(radii[:, :, 0], axis=1)[:, None]
    radii[:, :, 1] /= np.linalg.norm(radii[:, :, 1], axis=1)[:, None]
    d = hits[:, :2, 0] + (u[:, 0] - z[:, 0])[:, None] * radii[:, :, 0]
    e = hits[:, :2, 1] + (u[:, 1] - z[:, 1])[:, None] * radii[:, :, 1]
    em = e - d
    em2 = np.sum(em * em, 1)
    tmp1 = 1.0 / em2
    tmp2 = np.sqrt(ff[:, 2] ** 2 - 0.25 * em2)
    par = np.stack([np.arctan2(em[:, 1], em[:, 0]), q * (tmp2 - ff[:, 2]), q * (1.0 / ff[:, 2] + u[:, n])], 1)
    tmp2 = 1.0 / tmp2
    jac = np.zeros((t, 3, 3))
    jac[:, 0, 0] = (radii[:, 1, 0] * em[:, 0] - em[:, 1] * radii[:, 0, 0]) * tmp1
    jac[:, 0, 1] = (radii[:, 1, 1] * em[:, 0] - em[:, 1] * radii[:, 0, 1]) * tmp1
    jac[:, 1, 0] = q * (em[:, 0] * radii[:, 0, 0] + em[:, 1] * radii[:, 1, 0]) * tmp2
    jac[:, 1, 1] = q * (em[:, 0] * radii[:, 0, 1] + em[:, 1] * radii[:, 1, 1]) * tmp2
    jac[:, 2, 2] = q
    pick = [0, 1, n]
    cov = inv[:, pick][:, :, pick]
    cov = jac @ cov @ np.swapaxes(jac, 1, 2)
    # to the first corrected hit, adding the scattering before it, and back to the original origin
    translate_karimaki(par, cov, 0.5 * em[:, 0], 0.5 * em[:, 1])
    cov[:, 0, 0] += (1 + slope**2) * mult_scatt(s_total[:, 1] - s_total[:, 0], b_field, ff[:, 2], slope)
    translate_karimaki(par, cov, d[:, 0], d[:, 1])
    chi2 = np.sum(w * (z - u[:, :n]) ** 2, 1) + _kink_chi2(u, s, vb, curvature=u[:, n])
    return par, cov, chi2


def reference_fit(hits, hits_ge, b_field=B_FIELD) -> dict:
    """The Broken Line fit of tracks of ``n`` hits (``hits``: ``(T, 3, n)`` float64, ``hits_ge``:
    ``(T, 6, n)`` float32) as CMSSW's fit kernel writes it: ``state`` (T, 5), ``covariance``
    (T, 15, packed as :data:`PACKED`), ``pt``, ``eta``, ``chi2`` (over 2n - 5 degrees of
    freedom), ``charge``, all float64 but the int8 charge."""
    n = hits.shape[2]
    ff = fast_fit(hits)
    data = prepare(hits, ff, b_field)
    lpar, lcov, lchi2 = line_fit(hits_ge, ff, b_field, data)
    cpar, ccov, cchi2 = circle_fit(hits, hits_ge, ff, b_field, data)
    scale = 1.0 / b_field
    state = np.concatenate([cpar, lpar], 1)
    state[:, 2] *= scale
    full = np.zeros((len(hits), 5, 5))
    full[:, :3, :3] = ccov
    full[:, 3:, 3:] = lcov
    full[:, 2, :] *= scale
    full[:, :, 2] *= scale
    return {
        "state": state,
        "covariance": np.stack([full[:, r, c] for r, c in PACKED], 1),
        "pt": b_field / np.abs(cpar[:, 2]),
        "eta": np.arcsinh(lpar[:, 0]),
        "chi2": (cchi2 + lchi2) / (2 * n - 5),
        "charge": data["q"].astype(np.int8),
    }


def reference_fit_all(tracks: dict, b_field=B_FIELD) -> dict:
    """:func:`reference_fit` of every track of :func:`generate_tracks`, each with its hit count."""
    t = len(tracks["n_hits"])
    out = {"state": np.zeros((t, 5)), "covariance": np.zeros((t, 15)), "pt": np.zeros(t), "eta": np.zeros(t),
           "chi2": np.zeros(t), "charge": np.zeros(t, np.int8)}  # fmt: skip
    for n in range(3, MAX_HITS + 1):
        sel = np.flatnonzero(tracks["n_hits"] == n)
        if sel.size:
            got = reference_fit(tracks["hits"][sel, :, :n], tracks["hits_ge"][sel, :, :n], b_field)
            for key, value in got.items():
                out[key][sel] = value
    return out


def pulls(tracks: dict, fit: dict) -> dict:
    """(fitted - generated) / fitted error of phi, tip, charge / pt, cot(theta), zip per hit count:
    ``{n: (mean, rms) of each}`` (the kinks after the first hit move the truth, a little)."""
    truth = np.stack([tracks["phi"], tracks["tip"], tracks["charge"] / tracks["pt"], tracks["cot_theta"],
                      tracks["zip"]], 1)  # fmt: skip
    diag = [0, 5, 9, 12, 14]
    out = {}
    for n in range(3, MAX_HITS + 1):
        sel = tracks["n_hits"] == n
        if not sel.any():  # no track of this hit count: no pull to give (the mean of none was nan)
            continue
        delta = fit["state"][sel] - truth[sel]
        delta[:, 0] = (delta[:, 0] + math.pi) % (2 * math.pi) - math.pi
        p = delta / np.sqrt(fit["covariance"][sel][:, diag])
        out[n] = [(float(np.mean(col)), float(np.sqrt(np.mean(col * col)))) for col in p.T]
    return out


def at_least(least: int):
    """An ``argparse`` type: a whole number of at least ``least`` (``--tracks 0`` printed nan pulls
    and said nothing wrong; ``--tracks -1`` and ``--seed -1`` were numpy's tracebacks). This file
    needs numpy only, so it has its own copy of ``portable.cli.at_least``."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {least}, got {value}")
        return value

    return whole


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--tracks", type=at_least(1), default=20000)
    parser.add_argument("--seed", type=at_least(0), default=1, help="numpy's random seed (0 or more)")
    args = parser.parse_args(argv)
    tracks = generate_tracks(args.tracks, args.seed)
    fit = reference_fit_all(tracks)
    names = ("phi", "tip", "q/pt", "cot", "zip")
    for n, cols in pulls(tracks, fit).items():
        print(f"{n} hits: " + "  ".join(f"{k} {m:+.2f}/{r:.2f}" for k, (m, r) in zip(names, cols)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
