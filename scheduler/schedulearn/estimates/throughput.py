"""Step time of a data-parallel job on any placement, fitted from the step times it reported.

The model is Pollux's (Qiao et al., OSDI 2021; adaptdl `goodput.py`), seven parameters:

    compute(m)    = alpha_c + beta_c * m                       one micro-step, m samples per GPU
    network(k, r) = 0                                    r = 1
                  = alpha_r + beta_r * max(r - 2, 0)     r GPUs on one node
                  = alpha_n + beta_n * max(r - 2, 0)     r GPUs on k > 1 nodes
    sync step     = (compute^gamma + network^gamma)^(1/gamma)  (gamma >= 1: overlap)
    step          = a * compute(m) + sync step                a accumulation micro-steps

Observations are what a job reports per configuration: nodes k, GPUs r, micro-batch m,
accumulation steps a, the optimiser step time, and (optionally) the time of one micro-step
without synchronisation (`compute_time`). The fit minimises the squared log errors (plus
Pollux's two small regularisers) with the parameters kept positive, and adopts Pollux's priors
where the data cannot tell: one micro-batch size seen -> compute time split evenly between its
constant and linear parts (optimistic for a job whose batch grows with its GPUs: a larger
micro-batch costs less per sample), all of it per sample for a job whose batch is fixed
(`fit(batch_fixed=True)`: more GPUs only shrink its micro-batch, and the even split valued its
second GPU at 1.33x — seen live: a fixed-batch job alone on 4 GPUs was never grown, and a
deadline job read `will miss` until it had measured 2 GPUs, then `on track`); no multi-node
run seen -> network costs at least 1.1x the on-node ones; no run on one node with several GPUs
-> the on-node costs left at ~0; never more than 2 GPUs -> no growth with the GPU count. With
one GPU only, synchronisation is unknown and the model is optimistic (a fixed batch: linear
speed-up): the exploration cap (`estimates.job`) bounds how far that is believed.

scipy is not a dependency: `fit` is a small Levenberg-Marquardt over log-parameters. Its linear
algebra is numpy's elementwise arithmetic and sums and a Cholesky solve in Python floats, never
BLAS or LAPACK: their kernels differ by processor (OpenBLAS picks one at run time,
`OPENBLAS_CORETYPE` overrides it) in the last bits, and a policy that resizes dozens of jobs on
fitted models turns last bits into other decisions — the same trace gave other figures on other
machines. Without them the fit, and with it every simulation, does not depend on the BLAS kernel
(tests/test_reproducible_numerics.py), at about the same speed (a fit of 7 configurations 7.3 ms,
6.6 ms with LAPACK). exp, log and power are the C library's (`estimates.libm`): numpy's own
loops for them are picked per processor as well, and differ on processors with AVX-512.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import libm

_TINY = 1e-8
#: weight of Pollux's regularisers (towards gamma = 1 and small retrogression terms) against the
#: mean squared log error: small, so exact data are fitted exactly
REG = 1.0


@dataclass(frozen=True, slots=True)
class PerfParams:
    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def compute_time(self, m):
        return self.alpha_c + self.beta_c * np.asarray(m, dtype=float)

    def network_time(self, k, r):
        k, r = np.asarray(k), np.asarray(r)
        extra = np.maximum(r - 2, 0)
        return np.select([k > 1, r > 1], [self.alpha_n + self.beta_n * extra,
                                          self.alpha_r + self.beta_r * extra], _TINY)

    def step_time(self, k, r, m, a=0):
        """Seconds per optimiser step (numpy-broadcast over the arguments)."""
        c = self.compute_time(m)
        g = self.gamma
        sync = libm.power(libm.power(c, g) + libm.power(self.network_time(k, r), g), 1.0 / g)
        return np.asarray(a) * c + sync


#: One observation: (nodes, GPUs, micro-batch per GPU, accumulation steps, step time, compute time or None).
Observation = tuple[int, int, float, int, float, "float | None"]

_NAMES = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r")


def fit(obs: Sequence[Observation], start: PerfParams | None = None,
        batch_fixed: bool = False) -> PerfParams | None:
    """Fit `PerfParams` to the observations (None when there are none). `batch_fixed`: the job's
    global batch does not grow with its GPUs (its micro-batch only shrinks as it grows), which
    sets the prior where one micro-batch size was seen."""
    obs = [o for o in obs if o[1] >= 1 and o[2] > 0 and o[4] > 0]
    if not obs:
        return None
    k = np.array([o[0] for o in obs], dtype=float)
    r = np.array([o[1] for o in obs], dtype=float)
    m = np.array([o[2] for o in obs], dtype=float)
    a = np.array([o[3] for o in obs], dtype=float)
    step = np.array([o[4] for o in obs], dtype=float)
    has_c = np.array([o[5] is not None and o[5] > 0 for o in obs])
    comp = np.array([o[5] if o[5] else 1.0 for o in obs], dtype=float)
    # The compute time: the whole step on one GPU without accumulation (nothing to synchronise),
    # else the time of a micro-step without synchronisation where the job measured one.
    alone = (r == 1) & (a == 0)
    known = has_c | alone
    comp = np.where(alone, step, comp)
    mean_c = float(comp[known].mean()) if known.any() else float(step.mean())

    init = [0.1 * mean_c, 0.01 * mean_c / max(float(m.mean()), 1.0), 0.1, 0.01, 0.1, 0.01]
    if start is not None:
        init = [max(getattr(start, n), _TINY) for n in _NAMES]
    fixed: dict[int, float] = {}
    if len(np.unique(m)) == 1 and batch_fixed:  # one micro-batch size, to be split: all of it
        fixed[0] = _TINY * mean_c  # per sample (optimistic: half the batch, half the time)
        fixed[1] = mean_c / float(m[0])
    elif len(np.unique(m)) == 1:  # one micro-batch size, larger ones ahead: split it evenly
        fixed[0] = mean_c / 2
        fixed[1] = mean_c / 2 / float(m[0])
    if not np.any(k > 1):
        fixed[2], fixed[3] = _TINY, _TINY
    if not np.any((k == 1) & (r > 1)):
        fixed[4], fixed[5] = _TINY, _TINY
    if not np.any(r > 2):
        fixed[3], fixed[5] = _TINY, _TINY
    free = [i for i in range(6) if i not in fixed]
    n_step, n_comp = len(obs), int(known.sum())

    def params_of(u: np.ndarray) -> tuple[np.ndarray, float]:
        p = np.empty(6)
        for i, v in fixed.items():
            p[i] = v
        p[free] = libm.exp(np.clip(u[:-1], -60.0, 60.0))
        return p, 1.0 + 9.0 / (1.0 + math.exp(-min(max(float(u[-1]), -30.0), 30.0)))

    multi, on_node, extra = k > 1, (k == 1) & (r > 1), np.maximum(r - 2, 0)
    log_step = libm.log(step)
    log_comp = libm.log(comp[known])

    def residuals(u: np.ndarray) -> np.ndarray:
        p, g = params_of(u)
        c = p[0] + p[1] * m
        net = np.where(multi, p[2] + p[3] * extra, np.where(on_node, p[4] + p[5] * extra, _TINY))
        pred = a * c + libm.power(libm.power(c, g) + libm.power(net, g), 1.0 / g)
        res = [(libm.log(pred) - log_step) / math.sqrt(n_step)]
        if n_comp:
            res.append((libm.log(c[known]) - log_comp) / math.sqrt(n_comp))
        res.append(REG * np.array([math.sqrt(1e-3) * (g - 1.0), 0.1 * p[3] / p[2], 0.1 * p[5] / p[4]]))
        return np.concatenate(res)

    g0 = start.gamma if start is not None else 1.001
    u = np.array([math.log(init[i]) for i in free] + [_logit((g0 - 1.0) / 9.0)])
    u = _levenberg_marquardt(residuals, u)
    p, g = params_of(u)
    if not np.any(k > 1):  # Pollux's prior: crossing nodes costs at least as much as staying on one
        p[2], p[3] = max(p[2], 1.1 * p[4]), max(p[3], 1.1 * p[5])
    return PerfParams(*(float(x) for x in p), gamma=float(g))


def _logit(x: float) -> float:
    x = min(max(x, 1e-6), 1 - 1e-6)
    return math.log(x / (1 - x))


def _sq(r: np.ndarray) -> float:
    """r . r without BLAS (numpy's pairwise sum: the same on every processor)."""
    return float(np.sum(r * r))


def _solve_spd(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """x with a x = b for a symmetric positive definite `a` of a few rows: Cholesky in Python
    floats (LAPACK's result depends on the BLAS kernel); None when `a` is not positive definite
    in floating point."""
    n = len(b)
    rows, low = a.tolist(), [[0.0] * n for _ in range(n)]
    for i in range(n):
        li, ai = low[i], rows[i]
        for j in range(i + 1):
            lj, acc = low[j], ai[j]
            for k in range(j):
                acc -= li[k] * lj[k]
            if i == j:
                if not acc > 0.0:
                    return None
                li[i] = math.sqrt(acc)
            else:
                li[j] = acc / lj[j]
    y = b.tolist()
    for i in range(n):  # L y = b
        li, acc = low[i], y[i]
        for k in range(i):
            acc -= li[k] * y[k]
        y[i] = acc / li[i]
    for i in range(n - 1, -1, -1):  # L^T x = y
        acc = y[i]
        for k in range(i + 1, n):
            acc -= low[k][i] * y[k]
        y[i] = acc / low[i][i]
    return np.array(y)


def _levenberg_marquardt(f, u: np.ndarray, iters: int = 40) -> np.ndarray:
    r = f(u)
    cost = _sq(r)
    lam = 1e-3
    for _ in range(iters):
        jac = np.empty((r.size, u.size))
        for j in range(u.size):
            du = np.zeros_like(u)
            du[j] = 1e-6
            jac[:, j] = (f(u + du) - r) / 1e-6
        jtj = np.sum(jac[:, :, None] * jac[:, None, :], axis=0)  # J^T J and J^T r, no BLAS
        jtr = np.sum(jac * r[:, None], axis=0)
        improved = False
        while lam < 1e8:
            step = _solve_spd(jtj + lam * (np.diag(np.diag(jtj)) + 1e-12 * np.eye(u.size)), -jtr)
            if step is None:  # J^T J + lam D not positive definite in floating point: damp more
                lam *= 4
                continue
            new = u + step
            rn = f(new)
            c = _sq(rn)
            if np.isfinite(c) and c < cost:
                improved = cost - c > 1e-7 * cost + 1e-14
                u, r, cost, lam = new, rn, c, max(lam / 3, 1e-9)
                break
            lam *= 4
        if not improved:
            break
    return u
