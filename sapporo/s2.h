/* The S2 split's short-range factors (Hockney & Eastwood's S2 clouds of diameter a, the
 * split of Phantom-GRAPE's PG5/table), written once for the force kernels (CUTOFF 1,
 * variants.h) and the P^3M short-range kernel (SPLIT 1, pm_window.h): with x = 2 R / a,
 * g(R) = S2_G_IN(x) / 140 for x < 1 and S2_G_OUT(2 - x) / 140 for 1 <= x < 2 (zero beyond),
 * h(R) likewise with S2_H_IN and S2_H_OUT; the pair force is g m / R^2 and the potential
 * -h m / R (sapporo.reference.cutoff_factors gives them by quadrature). */
#ifndef SAPPORO_S2_H
#define SAPPORO_S2_H

#define S2_G_IN(x) \
    (140 - (x) * (x) * (x) * (224 + (x) * (x) * (-224 + (x) * (70 + (x) * (48 - 21 * (x))))))
#define S2_G_OUT(t) ((t) * (t) * (t) * (t) * (t) * (168 + (t) * (-182 + (t) * (64 - 7 * (t)))))
#define S2_H_IN(x) \
    (140 - (x) * (208 - (x) * (x) * (112 + (x) * (x) * (-56 + (x) * (14 + (x) * (8 - 3 * (x)))))))
#define S2_H_OUT(t) ((t) * (t) * (t) * (t) * (t) * (t) * (14 + (t) * (-8 + (t))))

#endif
