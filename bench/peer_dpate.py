"""Driver for bench_propensity.py: runs the PyPI package ``dpate`` 0.0.1 (a separate benchmark
environment with ``scikit-learn<1.8``; never a dependency of this project) on site files and
prints its estimates as JSON: ``{"prop_blocking": [[site estimates] per repetition], ...}``.

Usage: ``python peer_dpate.py REPS SEED EPS site0.npz [site1.npz ...]`` (each file holds ``w``,
``y`` in [0, 1] and ``x``, the covariates' design columns). The peer's output perturbation assumes
feature rows of norm at most 1: each row is divided by the largest row norm of the site (which
the peer's own accounting ignores; our benchmark states it). ``Y_bound = 1`` (the peer reads
``-Y_bound <= Y <= Y_bound``).
"""

import json
import sys

import numpy as np

from dpate import dp_ipw_sequential, dp_prop_blocking


def main() -> None:
    reps, seed, eps = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    del seed  # the peer draws its noise from fresh unseeded generators (dpate.utils.get_noise)
    out = {"prop_blocking": [], "ipw_sequential": []}
    sites = [np.load(f) for f in sys.argv[4:]]
    for _ in range(reps):
        rows = {"prop_blocking": [], "ipw_sequential": []}
        for s in sites:
            x = s["x"] / max(np.linalg.norm(s["x"], axis=1).max(), 1e-12)
            w, y = s["w"].astype(int), s["y"]
            rows["prop_blocking"].append(float(dp_prop_blocking(x, w, y, 1.0, eps)))
            rows["ipw_sequential"].append(float(dp_ipw_sequential(x, w, y, 1.0, eps)))
        for k, v in rows.items():
            out[k].append(v)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
