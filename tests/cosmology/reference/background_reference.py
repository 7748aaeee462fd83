#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# Reference values for tests/cosmology/test_background.cpp, in 30-digit arithmetic (mpmath), independent of
# cosmology/src/background.cpp: D1 from the hypergeometric closed form of flat Lambda-CDM (D1 = a 2F1(1/3, 1; 11/6;
# -Omega_Lambda a^3 / Omega_m), normalised D1 -> a) and, for a curved model, from the Heath integral by mpmath.quad;
# f1 by numerical differentiation of D1; D2 and f2 from mpmath's Taylor-series ODE solver (odefun) on the unscaled
# equations for (D1, D1', D2, D2') in x = ln a, started at a = 1e-8 from the exact D1, f1 and D2 = -3/7 D1^2.
# Run: /usr/bin/python3 background_reference.py   (about a minute)
import mpmath as mp

mp.mp.dps = 30


def reference(om, ol, scale_factors):
    om, ol = mp.mpf(om), mp.mpf(ol)
    ok = 1 - om - ol
    P = lambda a: om + ok * a + ol * a**3
    if ok == 0:
        d1 = lambda a: a * mp.hyp2f1(mp.mpf(1) / 3, 1, mp.mpf(11) / 6, -ol * a**3 / om)
    else:
        d1 = lambda a: mp.mpf(5) / 2 * om * a * mp.sqrt(P(a)) * mp.quad(lambda w: 2 * w**4 * P(a * w * w) ** -1.5, [0, 1])
    f1 = lambda a: mp.diff(lambda x: mp.log(d1(mp.exp(x))), mp.log(a))

    def system(x, y):
        a = mp.exp(x)
        g = -(3 * om + 2 * ok * a) / (2 * P(a))  # dln E / dln a
        s = mp.mpf(3) / 2 * om / P(a)  # (3/2) Omega_m(a)
        return [y[1], -(2 + g) * y[1] + s * y[0], y[3], -(2 + g) * y[3] + s * (y[2] - y[0] ** 2)]

    a0 = mp.mpf("1e-8")
    start1, rate1 = d1(a0), f1(a0)
    start2 = -mp.mpf(3) / 7 * start1**2
    solution = mp.odefun(system, mp.log(a0), [start1, rate1 * start1, start2, 2 * rate1 * start2])
    print(f"// Omega_m = {om}, Omega_Lambda = {ol}: {{a, D1, f1, D2, f2}}")
    for a in scale_factors:
        y = solution(mp.log(mp.mpf(a)))
        print(f"    {{{a}, {mp.nstr(d1(mp.mpf(a)), 17)}, {mp.nstr(f1(mp.mpf(a)), 17)}, {mp.nstr(y[2], 17)}, "
              f"{mp.nstr(y[3] / y[2], 17)}}},")


if __name__ == "__main__":
    reference("0.32", "0.68", ["0.01", "0.1", "0.5", "1"])
    reference("0.3", "0.8", ["0.01", "0.1", "0.5", "1"])
