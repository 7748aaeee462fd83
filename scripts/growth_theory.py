#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What the growth of the largest modes of an N-body box should be, beside what `matcha analyze growth --json`
measured: linear theory D1(a)/D1(a_start), corrected for the two effects that move a simulation away from it on
those scales, each in its standard form.

1. The lattice (particle linear theory, PLT: Marcos, Baertschiger, Joyce, Gabrielli & Sylos Labini 2006, PRD 73,
   103507; Joyce & Marcos 2007, PRD 75, 063516). Bodies start on a simple cubic lattice of spacing l = L/n. To linear
   order in the displacements u, a mode of wavevector k obeys u'' + (2 + dln H/dln a) u' = (3/2) Omega_m(a) D(k) u
   (' = d/dln a), where D(k) = (Phi(0) - Phi(k)) / (4 pi G rho), Phi(k) the lattice sum of grad grad (G m / r)
   e^{-i k.R} over the sites R != 0 with the mean density subtracted, by Ewald summation here. D(k) -> k^ k^ as
   k -> 0 (the fluid), its eigenvalues eps_n sum to 1 (Kohn's sum rule, checked), and along an axis the longitudinal
   eps exceeds 1, along a diagonal it falls short: the lattice grows modes at rates that depend on k l and on the
   direction. The initial conditions put u along k^ with the fluid's growing-mode velocity f1 H u; each eigenvector's
   share grows with its own eps (an ODE in ln a per eps), and the density mode is k^.u. Exact for the linear regime
   of the lattice, whatever the amplitude's smallness; the force law is Newton's (matcha's softening, 1/40 of l, and
   its TreePM split change the lattice sums by far less than the effects here).
2. The first nonlinear corrections (standard perturbation theory at one loop, fluid): a mode
   delta = D delta_L + D^2 delta_2 + D^3 delta_3 + ... (EdS kernels with the Lambda-CDM D, the usual approximation).
   Against the start (z = 49, where the corrections are ~1/1500 of today's and are neglected)
     the cross ratio Re sum d_end d_start^* / sum |d_start|^2 = (D/D_s) (1 + P_13/(2 P_L)), the propagator (only
       <delta_3 delta_L> survives; Crocce & Scoccimarro 2006, PRD 73, 063519), resummed at high k exp(-k^2 sv^2/2);
     the auto ratio sum |d_end|^2 / sum |d_start|^2 = (D/D_s)^2 (1 + (P_22 + P_13)/P_L),
   with (Makino, Sasaki & Suto 1992, PRD 46, 585; Jain & Bertschinger 1994, ApJ 431, 495; Bernardeau et al. 2002,
   Phys. Rep. 367, 1, eqs. 148-160; in this form Carlson, White & Padmanabhan 2009, PRD 80, 043531, eqs. 5-6),
   r = q/k:
     P_22(k) = k^3/(98 (2 pi)^2) int dr P_L(kr) int_-1^1 dx P_L(k sqrt(1 + r^2 - 2rx)) (3r + 7x - 10rx^2)^2
               / (1 + r^2 - 2rx)^2,
     P_13(k) = k^3 P_L(k)/(252 (2 pi)^2) int dr P_L(kr) [12/r^2 - 158 + 100r^2 - 42r^4
               + 3/r^3 (r^2 - 1)^3 (7r^2 + 2) ln|(1 + r)/(1 - r)|]   (the whole 2 <delta_1 delta_3>),
   whose low-k limits are P_13 -> -(61/105) k^2 sv^2 P_L, P_22 ~ k^4, with sv^2 = (1/(6 pi^2)) int P_L(q) dq.
   P_L is the linear spectrum at the end's a. Beside a growth file the integrals are sums over the box's own modes
   (those of its initial conditions, |m_i| < n/2; BoxLoop): no mode below k_F, none beyond the lattice's; the auto
   correction hardly notices (the infrared parts of P_13 and P_22 cancel), the propagator's is ~7% smaller. And the
   modes q that feed the loops grew as the lattice let them: P_L(q) times the lattice's growth squared averaged over
   the directions of |q| (Lattice.power_factor; an approximation: the lattice's own nonlinear kernels are the fluid's
   here), which matters where the loops draw on q near the lattice's Nyquist wavenumber (coarse lattices).
Both corrections are small, so the expectation per mode is g_PLT (1 + SPT term); per bin it is averaged over the
bin's modes (the integer wavevectors of its shell) with the weights the measurement's sums give them, P_L(k) (exact
for --fixed-amplitude initial conditions, the mean otherwise).

The linear spectrum is EH98 (tests/cosmology/reference/eisenstein_hu_reference.py, written from the paper apart from
matcha's C++) normalised to sigma_8 here; where a growth file carries matcha's own P_L at each bin (analyze growth
--linear), a different spectrum is refused rather than compared.

Usage:
  /usr/bin/python3 scripts/growth_theory.py GROWTH_JSON [GROWTH_JSON ...] [--power eh|eh-nowiggle] [--sigma8 S]
                   [--ns N] [--omega-b B] [--check TOL] [--json]
  /usr/bin/python3 scripts/growth_theory.py --k K,K,... [--z Z] [--omega-m M] [--h H] [...]      (SPT alone)
GROWTH_JSON: outputs of `matcha analyze growth --json` of one box (a pair with inverted phases: the ratios are averaged
bin by bin, which cancels the terms odd in delta_L). --sigma8, --ns, --omega-b, --power name the spectrum of the
initial conditions (ic cosmo's defaults). --check TOL: exit 1 unless every bin's measured cross ratio (over D) is
within TOL of the expectation (PLT + SPT) and its auto ratio (over D^2) within 2 TOL. --self-test: the checks the
numbers rest on (Ewald's sums, the sum rule, the fluid limits, SPT's low-k limit). Exit 2 for bad input (one line on
stderr).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
from scipy import integrate, special

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cosmology", "reference"))
import eisenstein_hu_reference as eh  # noqa: E402

T_CMB = 2.7255  # matcha's default (cosmology/linear_power.hpp)
SIGMA8_RADIUS = 8.0
# ic cosmo's defaults (Planck 2018), as cosmology/linear_power.hpp and background.hpp set them.
DEFAULTS = {"omega_m": 0.3111, "omega_b": 0.0490, "h": 0.6766, "ns": 0.9665, "sigma8": 0.8102}


class BadInput(Exception):
    pass


class Background:
    """Lambda-CDM with curvature, no radiation: E(a), D1(a) (Heath 1977's integral, D1 -> a as a -> 0) and f1(a)."""

    def __init__(self, om, ol):
        self.om, self.ol, self.ok = om, ol, 1.0 - om - ol

    def e2(self, a):
        return self.om / a**3 + self.ok / a**2 + self.ol

    def growth(self, a):
        value, _ = integrate.quad(lambda x: (x * math.sqrt(self.e2(x))) ** -3, 0.0, a, epsabs=0, epsrel=1e-13,
                                  limit=200)
        return 2.5 * self.om * math.sqrt(self.e2(a)) * value

    def rate(self, a):
        # D1 = (5/2) Omega_m E I with I' = (a E)^-3: f1 = dln E/dln a + (5/2) Omega_m / (a^2 E^2 D1), no differencing.
        e2 = self.e2(a)
        dln_e = (-3.0 * self.om / a**3 - 2.0 * self.ok / a**2) / (2.0 * e2)
        return dln_e + 2.5 * self.om / (a * a * e2 * self.growth(a))

    def mode_growth(self, eps, a_start, a_end):
        """u(a_end) for u'' + (2 + dln E/dln a) u' = (3/2) Omega_m(a) eps u, u(a_start) = 1, u' = f1(a_start)."""
        def rhs(x, y):
            a = math.exp(x)
            e2 = self.e2(a)
            dln_e = (-3.0 * self.om / a**3 - 2.0 * self.ok / a**2) / (2.0 * e2)
            return [y[1], -(2.0 + dln_e) * y[1] + 1.5 * self.om / a**3 / e2 * eps * y[0]]
        solution = integrate.solve_ivp(rhs, [math.log(a_start), math.log(a_end)], [1.0, self.rate(a_start)],
                                       method="DOP853", rtol=1e-11, atol=1e-14)
        return solution.y[0, -1]


class LinearSpectrum:
    """P_L(k) = A k^n_s T(k)^2 at z = 0 with sigma(8 Mpc/h) = sigma8; k in h/Mpc."""

    def __init__(self, form, om, ob, h, ns, sigma8):
        self.transfer = eh.with_wiggles if form == "eh" else eh.no_wiggle
        self.om, self.ob, self.h, self.ns = om, ob, h, ns
        self.amplitude = 1.0
        ln_k = np.linspace(math.log(1e-5), math.log(1e3), 200001)
        k = np.exp(ln_k)
        x = k * SIGMA8_RADIUS
        window = 3.0 * (np.sin(x) - x * np.cos(x)) / x**3
        sigma2 = integrate.simpson(k**3 * self(k) * window**2, x=ln_k) / (2.0 * math.pi**2)
        self.amplitude = sigma8**2 / sigma2

    def __call__(self, k):
        k = np.asarray(k, dtype=float)
        t, _ = self.transfer(np.maximum(k, 1e-30), self.om, self.ob, self.h, T_CMB)
        return np.where(k > 0, self.amplitude * k**self.ns * t * t, 0.0)


def p13_bracket(r):
    """P_13's kernel, 12/r^2 - 158 + 100 r^2 - 42 r^4 + 3/r^3 (r^2 - 1)^3 (7 r^2 + 2) ln|(1 + r)/(1 - r)|, with its
    series where the closed form cancels to rounding (checked against 40 digits)."""
    r = np.asarray(r, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log(np.abs((1.0 + r) / (1.0 - r)))
        bracket = (12.0 / r**2 - 158.0 + 100.0 * r**2 - 42.0 * r**4
                   + 3.0 / r**3 * (r * r - 1.0) ** 3 * (7.0 * r * r + 2.0) * log)
    large, small = r > 20.0, r < 0.05
    rl, rs = r[large], r[small]
    bracket[large] = -488.0 / 5 + 96.0 / 5 / rl**2 - 160.0 / 21 / rl**4 - 1376.0 / 1155 / rl**6
    bracket[small] = -168.0 + 928.0 / 5 * rs**2 - 4512.0 / 35 * rs**4 + 416.0 / 21 * rs**6
    bracket[np.abs(r - 1.0) < 1e-10] = -88.0  # its limit at r = 1
    return bracket


def f2_symmetric(q1, q2):
    """F2(q1, q2) symmetrised, for arrays of vectors (..., 3)."""
    n1, n2 = np.linalg.norm(q1, axis=-1), np.linalg.norm(q2, axis=-1)
    mu = np.sum(q1 * q2, axis=-1) / (n1 * n2)
    return 5.0 / 7.0 + 0.5 * mu * (n1 / n2 + n2 / n1) + 2.0 / 7.0 * mu * mu


class BoxLoop:
    """The one-loop terms in the box's own modes: a simulation's loops sum over its modes q = k_F m with |m_i| < n/2
    (the modes its initial conditions have), not over a continuum: no q below k_F (which takes ~5% off sv^2 here, and
    as much off the propagator's correction), a discrete shell structure near k. P_13, isotropic, as a sum over the
    modes' shells of the kernel above, (k^2 P_L(k)/504) (1/V) sum_q P_L(q) bracket(q/k)/q^2; P_22 per mode vector k as
    (2/V) sum_q F2(q, k - q)^2 P_L(q) P_L(|k - q|) over the modes q (and k - q) within |q| <= Q_MAX, where P_L^2 has
    fallen off (what lies beyond changes P_22 by < 1e-3 of itself at k < 0.05 h/Mpc)."""

    Q_MAX = 0.3  # h/Mpc, for P_22's sum

    def __init__(self, spectrum, box, side, factor=None):
        # factor(q): what the modes q feeding the loops grew by beside the fluid (the lattice's), 1 if None; the
        # mode k itself keeps P_L (its own growth is the lattice term's).
        self.p, self.volume = spectrum, box**3
        self.inner_p = spectrum if factor is None else (lambda q: spectrum(q) * factor(np.asarray(q)))
        self.fundamental = 2.0 * math.pi / box
        self.half = (side - 1) // 2  # |m_i| < n/2
        # How many modes of the cube have each |m|^2: the 1D squares' counts convolved three times.
        axis = np.bincount(np.arange(-self.half, self.half + 1) ** 2)
        counts = np.convolve(np.convolve(axis, axis), axis)
        squares = np.nonzero(counts)[0][1:]
        self.q, self.counts = self.fundamental * np.sqrt(squares), counts[squares]
        self.pq = self.inner_p(self.q)
        self.sigma_v2 = np.sum(self.counts * self.pq / self.q**2) / (3.0 * self.volume)
        reach = int(min(self.half, math.ceil(self.Q_MAX / self.fundamental)))
        r = np.arange(-reach, reach + 1)
        m = np.array(np.meshgrid(r, r, r, indexing="ij")).reshape(3, -1).T
        norm2 = np.sum(m * m, axis=1)
        self.inner = m[(norm2 > 0) & (norm2 <= reach * reach)]

    def p13(self, k):
        weights = self.counts * self.pq * p13_bracket(self.q / k) / self.q**2
        return k * k * float(self.p(k)) / 504.0 * np.sum(weights) / self.volume

    def p22(self, mode):
        mode = np.asarray(mode)
        other = mode[None, :] - self.inner
        keep = np.all(np.abs(other) <= self.half, axis=1) & np.any(other != 0, axis=1)
        q, kq = self.fundamental * self.inner[keep], self.fundamental * other[keep]
        terms = (f2_symmetric(q, kq) ** 2 * self.inner_p(np.linalg.norm(q, axis=1))
                 * self.inner_p(np.linalg.norm(kq, axis=1)))
        return 2.0 * np.sum(terms) / self.volume


class OneLoop:
    """sigma_v^2, P_13 and P_22 of a linear spectrum (its z = 0 amplitude; scale by D^2 outside)."""

    Q_MIN, Q_MAX = 1e-5, 50.0  # h/Mpc: EH98 P_L q^2 at 50 h/Mpc adds < 1e-4 to any of the integrals

    def __init__(self, spectrum, points=4001, angles=400):
        self.p = spectrum
        self.ln_q = np.linspace(math.log(self.Q_MIN), math.log(self.Q_MAX), points)
        self.q = np.exp(self.ln_q)
        self.pq = spectrum(self.q)
        self.x, self.wx = special.roots_legendre(angles)
        self.sigma_v2 = integrate.simpson(self.pq * self.q, x=self.ln_q) / (6.0 * math.pi**2)

    def p13(self, k):
        r = self.q / k
        return k**3 * self.p(k) / (252.0 * 4.0 * math.pi**2) * integrate.simpson(self.pq * p13_bracket(r) * r,
                                                                                 x=self.ln_q)

    def p22(self, k):
        r = self.q[:, None] / k
        x = self.x[None, :]
        s2 = 1.0 + r * r - 2.0 * r * x
        kernel = (3.0 * r + 7.0 * x - 10.0 * r * x * x) ** 2 / np.maximum(s2, 1e-300) ** 2
        inner = (self.p(k * np.sqrt(np.maximum(s2, 0.0))) * kernel) @ self.wx
        return k**3 / (98.0 * 4.0 * math.pi**2) * integrate.simpson(self.pq * inner * self.q / k, x=self.ln_q)


class Lattice:
    """The simple cubic lattice's dynamical matrix D(k) (spacing 1, k in units of 1/spacing), by Ewald summation."""

    def __init__(self, alpha=2.0, real=4, reciprocal=4):
        self.alpha = alpha
        r = np.arange(-real, real + 1)
        sites = np.array(np.meshgrid(r, r, r, indexing="ij")).reshape(3, -1).T
        self.sites = sites[np.any(sites != 0, axis=1)].astype(float)
        d = np.linalg.norm(self.sites, axis=1)
        erfc = special.erfc(alpha * d)
        gauss = 2.0 * alpha / math.sqrt(math.pi) * np.exp(-((alpha * d) ** 2))
        first = -erfc / d**2 - gauss / d  # h'(r) of h = erfc(alpha r)/r
        second = 2.0 * erfc / d**3 + gauss * (2.0 / d**2 + 2.0 * alpha**2)  # h''(r)
        rh = self.sites / d[:, None]
        outer = rh[:, :, None] * rh[:, None, :]
        self.real = second[:, None, None] * outer + (first / d)[:, None, None] * (np.eye(3)[None] - outer)
        g = np.arange(-reciprocal, reciprocal + 1)
        self.reciprocal = 2.0 * math.pi * np.array(np.meshgrid(g, g, g, indexing="ij")).reshape(3, -1).T
        self.phi0 = self._phis(np.zeros((1, 3)))[0]

    def _phis(self, ks):
        """sum_{R != 0} grad grad (1/r)(R) e^{-ik.R} for every row of ks (N, 3), the mean density subtracted (the
        k + G = 0 term left out)."""
        k = np.asarray(ks, dtype=float)
        out = np.einsum("rij,nr->nij", self.real, np.cos(k @ self.sites.T))
        q = k[:, None, :] + self.reciprocal[None, :, :]
        q2 = np.sum(q * q, axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            weight = np.where(q2 > 1e-24, -4.0 * math.pi * np.exp(-q2 / (4.0 * self.alpha**2)) / q2, 0.0)
        out += np.einsum("ngi,ngj,ng->nij", q, q, weight)
        return out + 4.0 * self.alpha**3 / (3.0 * math.sqrt(math.pi)) * np.eye(3)  # less the smooth part's R = 0

    def matrices(self, ks, chunk=2048):
        """D(k) = (Phi(0) - Phi(k)) / (4 pi G rho) of every row of ks (N, 3), in chunks."""
        ks = np.asarray(ks, dtype=float).reshape(-1, 3)
        out = np.empty((len(ks), 3, 3))
        for first in range(0, len(ks), chunk):
            out[first:first + chunk] = (self.phi0[None] - self._phis(ks[first:first + chunk])) / (4.0 * math.pi)
        return out

    def matrix(self, k):
        return self.matrices(k)[0]

    def growth(self, ks, background, a_start, a_end):
        """Per wavevector (rows of ks, in units of 1/spacing): the density mode's growth over the fluid's
        D(a_end)/D(a_start), each eigenvector's share of k^ grown from the fluid's growing mode with its own eps."""
        eps, vectors = np.linalg.eigh(self.matrices(ks))
        # The growth is smooth in eps: solved at Chebyshev nodes and interpolated (to ~1e-12 over the range).
        low, high = eps.min() - 1e-6, eps.max() + 1e-6
        nodes = 0.5 * (low + high) + 0.5 * (high - low) * np.cos(np.pi * (np.arange(24) + 0.5) / 24)
        values = [background.mode_growth(e, a_start, a_end) for e in nodes]
        fit = np.polynomial.chebyshev.Chebyshev.fit(nodes, values, 23, domain=[low, high])
        khat = ks / np.linalg.norm(ks, axis=1)[:, None]
        share = np.einsum("ni,nij->nj", khat, vectors) ** 2
        fluid = background.growth(a_end) / background.growth(a_start)
        return np.sum(share * fit(eps), axis=1) / fluid

    def power_factor(self, background, a_start, a_end, directions=64, points=160):
        """The lattice's growth squared averaged over the directions of a shell |k| l (those inside the cube of the
        initial conditions' modes, |k_i| l < pi), as a function of |k| l: what the modes feeding the loops grew by."""
        golden = math.pi * (3.0 - math.sqrt(5.0))  # a Fibonacci sphere: near-uniform directions
        z = 1.0 - (2.0 * np.arange(directions) + 1.0) / directions
        unit = np.stack([np.sqrt(1 - z * z) * np.cos(golden * np.arange(directions)),
                         np.sqrt(1 - z * z) * np.sin(golden * np.arange(directions)), z], axis=1)
        norms = np.linspace(0.0, math.sqrt(3.0) * math.pi, points + 1)[1:]
        ks = (norms[:, None, None] * unit[None]).reshape(-1, 3)
        inside = np.all(np.abs(ks) < math.pi, axis=1)
        g2 = np.full(len(ks), np.nan)
        g2[inside] = self.growth(ks[inside], background, a_start, a_end) ** 2
        g2 = g2.reshape(points, directions)
        counts = np.sum(inside.reshape(points, directions), axis=1)
        table = np.where(counts > 0, np.nansum(g2, axis=1) / np.maximum(counts, 1), np.nan)
        # Near the cube's corners no sampled direction lies inside: the last shell that had one stands for them.
        for j in range(1, points):
            if np.isnan(table[j]):
                table[j] = table[j - 1]
        norms, table = np.concatenate([[0.0], norms]), np.concatenate([[1.0], table])
        return lambda x: np.interp(x, norms, table)


def self_test():
    """The checks the numbers above rest on; raises AssertionError."""
    lattice = Lattice()
    assert abs(np.trace(lattice.phi0) / (4 * math.pi) - 1.0) < 1e-12  # the background's 4 pi G rho per axis sum
    for k in ([0.3, 0.2, 0.1], [math.pi, 0, 0], [1.0, 1.0, 0.5]):
        eps = np.linalg.eigvalsh(lattice.matrix(k))
        assert abs(eps.sum() - 1.0) < 1e-10, eps  # Kohn's sum rule
        other = np.linalg.eigvalsh(Lattice(alpha=1.5, real=5, reciprocal=5).matrix(k))
        assert np.max(np.abs(eps - other)) < 1e-10, (eps, other)  # Ewald's split does not matter
    eps = np.linalg.eigvalsh(lattice.matrix([1e-3, 0, 0]))
    assert abs(eps[-1] - 1.0) < 1e-6 and np.max(np.abs(eps[:2])) < 1e-6  # the fluid limit
    background = Background(0.3111, 0.6889)
    fluid = background.growth(1.0) / background.growth(0.02)
    assert abs(background.mode_growth(1.0, 0.02, 1.0) / fluid - 1.0) < 1e-9  # eps = 1 is the fluid's D1
    loop = OneLoop(LinearSpectrum("eh", 0.3111, 0.049, 0.6766, 0.9665, 0.8102))
    k = 1e-3
    limit = -61.0 / 105.0 * k * k * loop.sigma_v2
    assert abs(loop.p13(k) / loop.p(k) / limit - 1.0) < 2e-3, (loop.p13(k) / loop.p(k), limit)
    assert loop.p22(2e-3) / loop.p22(1e-3) > 10  # ~k^4 at low k, against the k^n P_L
    # The box's sums: its shells hold every mode of the cube once (against a sum over the vectors themselves), the
    # low-k limit with the box's own sv^2, and P_22 the same for m and -m.
    box = BoxLoop(loop.p, 500.0, 16)
    r = np.arange(-7, 8)
    vectors = np.array(np.meshgrid(r, r, r, indexing="ij")).reshape(3, -1).T
    q = box.fundamental * np.linalg.norm(vectors[np.any(vectors != 0, axis=1)], axis=1)
    assert box.counts.sum() == 15**3 - 1
    assert abs(box.sigma_v2 / (np.sum(loop.p(q) / q**2) / (3.0 * box.volume)) - 1.0) < 1e-12
    k = 0.03
    direct = k * k * float(loop.p(k)) / 504.0 * np.sum(loop.p(q) * p13_bracket(q / k) / q**2) / box.volume
    assert abs(box.p13(k) / direct - 1.0) < 1e-12
    k = 1e-4
    assert abs(box.p13(k) / float(box.p(k)) / (-61.0 / 105.0 * k * k * box.sigma_v2) - 1.0) < 1e-3
    assert box.p22((2, 1, 0)) == box.p22((-2, -1, 0))


def shell_modes(k_low, k_high, fundamental, nyquist):
    """The integer wavevectors m (both k and -k) with k_low <= k_F |m| < k_high (<= at the Nyquist edge)."""
    top = int(math.ceil(k_high / fundamental))
    r = np.arange(-top, top + 1)
    m = np.array(np.meshgrid(r, r, r, indexing="ij")).reshape(3, -1).T
    norm = fundamental * np.linalg.norm(m, axis=1)
    upper = norm <= k_high if k_high >= nyquist * (1 - 1e-12) else norm < k_high
    return m[(norm >= k_low) & upper & (norm > 0)]


class Expectation:
    """Per bin: PLT's and SPT's relative corrections to the cross and auto ratios, alone and together."""

    def __init__(self, background, a_start, a_end, loop, lattice_side, box):
        self.background, self.a_start, self.a_end = background, a_start, a_end
        self.loop, self.side, self.box = loop, lattice_side, box  # loop: a BoxLoop
        self.fluid = background.growth(a_end) / background.growth(a_start)
        self.growth2 = (background.growth(a_end) / background.growth(1.0)) ** 2
        self.lattice = Lattice() if lattice_side else None

    def lattice_growth(self, modes, fundamental):
        """g per mode over the fluid's D/D_s (Lattice.growth), 1 without a lattice."""
        if self.lattice is None:
            return np.ones(len(modes))
        return self.lattice.growth(modes * fundamental * (self.box / self.side), self.background, self.a_start,
                                   self.a_end)

    def bin(self, modes, fundamental):
        k = fundamental * np.linalg.norm(modes, axis=1)
        unique, inverse = np.unique(np.round(k, 12), return_inverse=True)
        # P_L scales with D^2, the loops (P_L^2) with D^4.
        plin = self.loop.p(unique)[inverse] * self.growth2
        p13 = np.array([self.loop.p13(q) for q in unique])[inverse] * self.growth2**2
        # P_22 depends on the mode's direction in the box; m and -m share it.
        p22 = {}
        for m in map(tuple, modes):
            if m not in p22:
                p22[m] = p22[tuple(-v for v in m)] = self.loop.p22(m) * self.growth2**2
        p22 = np.array([p22[tuple(m)] for m in modes])
        weights = plin / plin.sum()
        g = self.lattice_growth(modes, fundamental)
        cross_spt, auto_spt = p13 / (2.0 * plin), (p13 + p22) / plin
        sv2 = self.loop.sigma_v2 * self.growth2
        return {
            "cross_lattice": float(weights @ g - 1.0),
            "cross_spt": float(weights @ cross_spt),
            "cross_expected": float(weights @ (g * (1.0 + cross_spt)) - 1.0),
            "cross_resummed": float(weights @ (np.exp(-k * k * sv2 / 2.0) - 1.0)),
            "auto_lattice": float(weights @ g**2 - 1.0),
            "auto_spt": float(weights @ auto_spt),
            "auto_expected": float(weights @ (g * g * (1.0 + auto_spt)) - 1.0),
            "auto_low_k_limit": float(weights @ (-61.0 / 105.0 * k * k * sv2)),
        }


def read_growth(path):
    try:
        with open(path) as f:
            data = json.load(f)
        for key in ("bins", "cosmology", "linear_growth", "bodies", "box", "k_fundamental", "k_nyquist"):
            data[key]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise BadInput("%s: not the output of matcha analyze growth --json (%s)" % (path, error))
    return data


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("growth", nargs="*", help="outputs of matcha analyze growth --json, of one box")
    parser.add_argument("--k", help="comma-separated wavenumbers (h/Mpc): SPT alone, without growth files")
    parser.add_argument("--z", type=float, default=0.0, help="with --k: the redshift (default 0)")
    parser.add_argument("--power", choices=["eh", "eh-nowiggle"], default="eh")
    for name in ("sigma8", "ns", "omega-b", "omega-m", "h"):
        parser.add_argument("--" + name, type=float, default=DEFAULTS[name.replace("-", "_")])
    parser.add_argument("--omega-lambda", type=float, help="with --k: default 1 - omega_m (flat)")
    parser.add_argument("--check", type=float, help="exit 1 unless every bin is within this of the expectation")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--self-test", action="store_true", help="run the checks the numbers rest on, then exit")
    args = parser.parse_args(argv)
    if not args.self_test and bool(args.growth) == bool(args.k):
        raise BadInput("give growth files or --k (one of the two)")
    for name in ("sigma8", "ns", "omega_b", "omega_m", "h"):
        if not math.isfinite(getattr(args, name)):
            raise BadInput("--%s must be finite" % name.replace("_", "-"))
    if not args.sigma8 > 0:
        raise BadInput("--sigma8 must be > 0")
    if args.check is not None and not args.check > 0:
        raise BadInput("--check must be a tolerance > 0")
    return args


def main(argv):
    args = parse(argv)
    if args.self_test:
        self_test()
        print("growth_theory.py: self-test passed")
        return 0
    runs = [read_growth(path) for path in args.growth]
    if runs:
        first = runs[0]
        for path, run in zip(args.growth[1:], runs[1:]):
            same = all(run[key] == first[key] for key in ("cosmology", "bodies", "box", "grid", "k_fundamental"))
            if not same or [b["k"] for b in run["bins"]] != [b["k"] for b in first["bins"]]:
                raise BadInput("%s: another box, cosmology, time or binning than %s" % (path, args.growth[0]))
        cosmo = first["cosmology"]
        om, ol = cosmo["omega_m"], cosmo["omega_lambda"]
        a_start, a_end, h = cosmo["scale_factor_start"], cosmo["scale_factor_end"], cosmo["hubble_param"]
        side = round(first["bodies"] ** (1.0 / 3.0))
        if side**3 != first["bodies"]:
            raise BadInput("%s: %d bodies are not a lattice of n^3" % (args.growth[0], first["bodies"]))
    else:
        om, h = args.omega_m, args.h
        ol = 1.0 - om if args.omega_lambda is None else args.omega_lambda
        a_start, a_end, side = None, 1.0 / (1.0 + args.z), None
    background = Background(om, ol)
    spectrum = LinearSpectrum(args.power, om, args.omega_b, h, args.ns, args.sigma8)
    if runs:
        # The loops' modes grew as the lattice let them: its growth squared, shell-averaged, at the end's a.
        spacing = first["box"] / side
        shell = Lattice().power_factor(background, a_start, a_end)
        loop = BoxLoop(spectrum, first["box"], side, lambda q: shell(q * spacing))
    else:
        loop = OneLoop(spectrum)
    growth2 = (background.growth(a_end) / background.growth(1.0)) ** 2
    rows = []
    if runs:
        expectation = Expectation(background, a_start, a_end, loop, side, first["box"])
        if abs(expectation.fluid / first["linear_growth"] - 1.0) > 1e-8:
            raise BadInput("D1(a)/D1(a_start) %.12g here, %.12g in %s" % (expectation.fluid, first["linear_growth"],
                                                                           args.growth[0]))
        for j, b in enumerate(first["bins"]):
            modes = shell_modes(b["k_low"], b["k_high"], first["k_fundamental"], first["k_nyquist"])
            if len(modes) != 2 * b["modes"]:
                raise BadInput("bin %d: %d modes in its shell, the file says %d" % (j, len(modes) // 2, b["modes"]))
            # matcha's own P_L at the bin's k, when the file has it: the same spectrum, or no comparison.
            if "linear_power" in b:
                mine = float(spectrum(b["k"])) * growth2
                if abs(mine / b["linear_power"] - 1.0) > 2e-3:
                    raise BadInput("bin %d: matcha's P_L %.6g and this script's %.6g differ: give the spectrum of the "
                                   "initial conditions (--power, --sigma8, --ns, --omega-b)" % (j, b["linear_power"],
                                                                                                mine))
            row = {"k": b["k"], "modes": b["modes"]}
            row.update(expectation.bin(modes, first["k_fundamental"]))
            g = first["linear_growth"]
            row["cross_measured"] = float(np.mean([run["bins"][j]["cross_ratio"] / g - 1.0 for run in runs]))
            row["auto_measured"] = float(np.mean([run["bins"][j]["auto_ratio"] / g**2 - 1.0 for run in runs]))
            rows.append(row)
    else:
        for text in args.k.split(","):
            try:
                k = float(text)
            except ValueError:
                k = math.nan
            if not (k > 0 and math.isfinite(k)):
                raise BadInput("--k: %r is not a wavenumber > 0" % text)
            sv2 = loop.sigma_v2 * growth2
            p13, p22, plin = loop.p13(k) * growth2**2, loop.p22(k) * growth2**2, float(loop.p(k)) * growth2
            rows.append({"k": k, "cross_spt": p13 / (2 * plin), "cross_resummed": math.exp(-k * k * sv2 / 2) - 1,
                         "auto_spt": (p13 + p22) / plin, "auto_p13": p13 / plin,
                         "auto_low_k_limit": -61.0 / 105.0 * k * k * sv2})

    summary = {"sigma_v": math.sqrt(loop.sigma_v2 * growth2), "sigma8": args.sigma8, "power": args.power,
               "scale_factor": a_end, "lattice": side, "runs": args.growth, "bins": rows}
    failed = []
    if args.check is not None and runs:
        for row in rows:
            # The auto ratio is the cross ratio squared, to first order: its errors are twice as large.
            for kind, tolerance in (("cross", args.check), ("auto", 2.0 * args.check)):
                if abs(row[kind + "_measured"] - row[kind + "_expected"]) > tolerance:
                    failed.append("%s at k = %.4g" % (kind, row["k"]))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_table(args, summary, runs, om, h)
    if failed:
        print("growth_theory.py: measured and expected differ by more than %g (cross; auto %g): %s"
              % (args.check, 2 * args.check, ", ".join(failed)))
        return 1
    return 0


def print_table(args, summary, runs, om, h):
    print("# EH98 %s, sigma8 %g, n_s %g, Omega_b %g, Omega_m %g, h %g; at a = %.6g sigma_v = %.4g Mpc/h%s"
          % (args.power, args.sigma8, args.ns, args.omega_b, om, h, summary["scale_factor"], summary["sigma_v"],
             "" if not summary["lattice"] else " (the modes of the box of %d^3 bodies)" % summary["lattice"]))
    percent = lambda value: "%+8.3f%%" % (100.0 * value)
    if runs:
        print("# measured: the mean of %d run(s): %s" % (len(runs), ", ".join(args.growth)))
        print("# relative to D1(a)/D1(a_start) (cross) and its square (auto): measured, lattice (PLT), fluid one loop "
              "(SPT), both")
        print("# %7s %5s |%9s %9s %9s %9s |%9s %9s %9s %9s" % ("k", "modes", "cross", "PLT", "SPT", "PLT+SPT", "auto",
                                                              "PLT", "SPT", "PLT+SPT"))
        for row in summary["bins"]:
            print("  %7.4f %5d |%s %s %s %s |%s %s %s %s" % (
                row["k"], row["modes"], percent(row["cross_measured"]), percent(row["cross_lattice"]),
                percent(row["cross_spt"]), percent(row["cross_expected"]), percent(row["auto_measured"]),
                percent(row["auto_lattice"]), percent(row["auto_spt"]), percent(row["auto_expected"])))
    else:
        print("# fluid one loop (SPT): cross = P13/(2P), resummed exp(-k^2 sv^2/2) - 1; auto = (P13 + P22)/P, P13/P "
              "alone, its low-k limit -(61/105) k^2 sv^2")
        print("# %7s |%9s %9s |%9s %9s %9s" % ("k", "cross", "resummed", "auto", "P13 only", "low-k"))
        for row in summary["bins"]:
            print("  %7.4f |%s %s |%s %s %s" % (row["k"], percent(row["cross_spt"]), percent(row["cross_resummed"]),
                                                percent(row["auto_spt"]), percent(row["auto_p13"]),
                                                percent(row["auto_low_k_limit"])))


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as error:
        print("growth_theory.py: error: %s" % error, file=sys.stderr)
        sys.exit(2)
