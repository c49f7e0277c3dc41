"""Small stand-ins for the paper's data sets, generated inline (for the engine's tests only)."""

from __future__ import annotations

import numpy as np

from dpate.experiments.data import Dataset, DataSource


def synth(n, domain_size, a, seed):
    """The paper's Synth recipe (section 4.1), inline."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1) if a is None else a
    b = rng.uniform(0, 0.4)
    x = rng.integers(0, domain_size, n)
    xv = x / (domain_size - 1)
    w = (rng.random(n) < 1 / (1 + np.exp(-a * (2 * xv - 1)))).astype(np.int8)
    y = b * xv + 0.5 * w + rng.uniform(0, 0.1, n)
    return w, y, x


def split(n, proportions, seed):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    p = np.asarray(proportions, float)
    cuts = np.floor(np.cumsum(p)[:-1] / p.sum() * n).astype(int)
    return [np.sort(s) for s in np.split(perm, cuts)]


def load(name):
    rng = np.random.default_rng(len(name))
    if name == "IST":
        n = 6000
        w = (rng.random(n) < 0.5).astype(np.int8)
        y = (rng.random(n) < 0.02 + 0.01 * (1 - w)).astype(float)
        return Dataset(name, w, y, 1.0)
    if name == "STAR":
        n = 5000
        w = (rng.random(n) < 0.25).astype(np.int8)
        y = np.clip(rng.normal(0.5, 0.1, n) + 0.02 * w, 0, 1)
        groups = rng.choice(
            ["rural", "suburban", "inner-city", "urban"], n, p=[0.42, 0.26, 0.23, 0.09]
        )
        return Dataset(
            name, w, y, 1.0, groups=groups, group_order=("rural", "suburban", "inner-city", "urban")
        )
    n = 750
    x = rng.integers(0, 16, n)
    w = (rng.random(n) < 0.2 + 0.02 * x).astype(np.int8)
    y = np.clip(rng.normal(0.4, 0.1, n) + 0.1 * w + 0.01 * x, 0, 1)
    return Dataset(name, w, y, 1.0, x, 16)


SOURCE = DataSource(load=load, synth=synth, split=split)
