"""Driver for bench_propensity.py: runs the PyPI package ``dpate`` 0.0.1 (a separate benchmark
environment with ``scikit-learn<1.8``; never a dependency of this project) and prints its
estimates as JSON: per group of sites, per repetition, per site, each of ``prop_blocking`` and
``ipw_sequential``.

Usage: ``python peer_dpate.py manifest.json``; the manifest holds ``reps``, ``eps`` and
``groups``, lists of site files (each holds ``w``, ``y`` in [0, 1] and ``x``, the covariates'
design columns). The peer's output perturbation assumes feature rows of norm at most 1: each row
is divided by the largest row norm of the site (a data-dependent constant the peer's accounting
leaves to its user; stated in docs/explanation/results.md). ``Y_bound = 1`` (the peer reads ``-Y_bound <= Y
<= Y_bound``). The peer draws its noise from fresh unseeded generators (``dpate.utils``).
"""

import json
import sys
import warnings

import numpy as np

from dpate import dp_ipw_sequential, dp_prop_blocking


def main() -> None:
    warnings.simplefilter("ignore")
    with open(sys.argv[1]) as f:
        manifest = json.load(f)
    reps, eps = int(manifest["reps"]), float(manifest["eps"])
    out = []
    for files in manifest["groups"]:
        sites = [np.load(f) for f in files]
        group = {"prop_blocking": [], "ipw_sequential": []}
        for _ in range(reps):
            rows = {"prop_blocking": [], "ipw_sequential": []}
            for s in sites:
                x = s["x"] / max(np.linalg.norm(s["x"], axis=1).max(), 1e-12)
                w, y = s["w"].astype(int), s["y"]
                rows["prop_blocking"].append(float(dp_prop_blocking(x, w, y, 1.0, eps)))
                rows["ipw_sequential"].append(float(dp_ipw_sequential(x, w, y, 1.0, eps)))
            for k, v in rows.items():
                group[k].append(v)
        out.append(group)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
