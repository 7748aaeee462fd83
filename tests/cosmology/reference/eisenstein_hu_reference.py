#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# Reference values for tests/cosmology/test_linear_power.cpp: the Eisenstein & Hu (1998, ApJ 496, 605) transfer
# functions, written from the paper's equations independently of cosmology/src/linear_power.cpp (numpy, vectorised
# over k, in the paper's variables: k in Mpc^-1 inside, h/Mpc outside). Run: /usr/bin/python3 eisenstein_hu_reference.py
import numpy as np

OMEGA_M, OMEGA_B, H, T_CMB = 0.3, 0.05, 0.7, 2.7255
K_H_PER_MPC = np.array([1e-4, 1e-3, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 3.0, 10.0, 100.0])


def with_wiggles(k_h, om, ob, h, tcmb):
    """T(k), EH98 eqs. 2-24, eq. 16; k_h in h/Mpc."""
    k = np.asarray(k_h) * h  # Mpc^-1
    w_m, w_b = om * h * h, ob * h * h
    fb, fc = ob / om, (om - ob) / om
    theta = tcmb / 2.7
    z_eq = 2.50e4 * w_m * theta**-4
    k_eq = 7.46e-2 * w_m * theta**-2
    b1 = 0.313 * w_m**-0.419 * (1.0 + 0.607 * w_m**0.674)
    b2 = 0.238 * w_m**0.223
    z_d = 1291.0 * w_m**0.251 / (1.0 + 0.659 * w_m**0.828) * (1.0 + b1 * w_b**b2)
    R = lambda z: 31.5 * w_b * theta**-4 * (z / 1e3) ** -1
    R_d, R_eq = R(z_d), R(z_eq)
    s = 2.0 / (3.0 * k_eq) * np.sqrt(6.0 / R_eq) * np.log((np.sqrt(1 + R_d) + np.sqrt(R_d + R_eq)) / (1 + np.sqrt(R_eq)))
    k_silk = 1.6 * w_b**0.52 * w_m**0.73 * (1.0 + (10.4 * w_m) ** -0.95)
    q = k / (13.41 * k_eq)
    a1 = (46.9 * w_m) ** 0.670 * (1.0 + (32.1 * w_m) ** -0.532)
    a2 = (12.0 * w_m) ** 0.424 * (1.0 + (45.0 * w_m) ** -0.582)
    alpha_c = a1**-fb * a2 ** -(fb**3)
    bb1 = 0.944 / (1.0 + (458.0 * w_m) ** -0.708)
    bb2 = (0.395 * w_m) ** -0.0266
    beta_c = 1.0 / (1.0 + bb1 * (fc**bb2 - 1.0))

    def t0(alpha, beta):  # eqs. 19-20
        ln = np.log(np.e + 1.8 * beta * q)
        c = 14.2 / alpha + 386.0 / (1.0 + 69.9 * q**1.08)
        return ln / (ln + c * q * q)

    f = 1.0 / (1.0 + (k * s / 5.4) ** 4)
    t_cdm = f * t0(1.0, beta_c) + (1.0 - f) * t0(alpha_c, beta_c)
    y = z_eq / (1.0 + z_d)
    G = y * (-6.0 * np.sqrt(1 + y) + (2.0 + 3.0 * y) * np.log((np.sqrt(1 + y) + 1.0) / (np.sqrt(1 + y) - 1.0)))
    alpha_b = 2.07 * k_eq * s * (1 + R_d) ** -0.75 * G
    beta_node = 8.41 * w_m**0.435
    beta_b = 0.5 + fb + (3.0 - 2.0 * fb) * np.sqrt((17.2 * w_m) ** 2 + 1.0)
    s_tilde = s / (1.0 + (beta_node / (k * s)) ** 3) ** (1.0 / 3.0)
    x = k * s_tilde
    t_b = (t0(1.0, 1.0) / (1.0 + (k * s / 5.2) ** 2) + alpha_b / (1.0 + (beta_b / (k * s)) ** 3) * np.exp(-((k / k_silk) ** 1.4))) * np.sin(x) / x
    return fb * t_b + fc * t_cdm, s


def no_wiggle(k_h, om, ob, h, tcmb):
    """T(k), EH98 eqs. 26-31; k_h in h/Mpc."""
    k = np.asarray(k_h) * h
    w_m, w_b, fb = om * h * h, ob * h * h, ob / om
    theta = tcmb / 2.7
    s = 44.5 * np.log(9.83 / w_m) / np.sqrt(1.0 + 10.0 * w_b**0.75)  # eq. 26
    alpha_gamma = 1.0 - 0.328 * np.log(431.0 * w_m) * fb + 0.38 * np.log(22.3 * w_m) * fb * fb
    gamma_eff = om * h * (alpha_gamma + (1.0 - alpha_gamma) / (1.0 + (0.43 * k * s) ** 4))
    q = np.asarray(k_h) * theta**2 / gamma_eff
    L0 = np.log(2.0 * np.e + 1.8 * q)
    C0 = 14.2 + 731.0 / (1.0 + 62.5 * q)
    return L0 / (L0 + C0 * q * q), s


if __name__ == "__main__":
    full, s = with_wiggles(K_H_PER_MPC, OMEGA_M, OMEGA_B, H, T_CMB)
    smooth, s_fit = no_wiggle(K_H_PER_MPC, OMEGA_M, OMEGA_B, H, T_CMB)
    print(f"// Omega_m {OMEGA_M}, Omega_b {OMEGA_B}, h {H}, T_CMB {T_CMB}: s = {s!r} Mpc (eq. 6), {s_fit!r} Mpc (eq. 26)")
    for k, t, t_nw in zip(K_H_PER_MPC, full, smooth):
        print(f"    {{{k!r}, {t!r}, {t_nw!r}}},")
