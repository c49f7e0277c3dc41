"""Example site extracts: a public data set split into the files its sites would hold.

The deployment guide's example study (``deployments/examples/star.toml``) has four sites, one per
entry-grade school urbanicity of Tennessee STAR. :func:`write_star_extracts` writes each site's
records as that site would keep them: ``<out>/<site>/star.parquet`` with the spec's columns,
``small_class`` (0/1) and ``math_score`` (the raw entry-grade maths score on its public scale
``[200, 800]``, which the spec maps to ``[0, B]`` with ``offset = 200``, ``bound = 600``). The
records come from :func:`dpate.data.datasets.load_star`, that is from the data directory that
``dpate data fetch star`` fills (downloaded from the original source, sha256 checked).
``dpate data extracts star OUT_DIR`` is the command line.

These are public research data: this builds examples to try a deployment with, never a site's
private records.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXTRACTS", "write_star_extracts"]

#: The data sets with example site extracts, and each one's file name inside a site's folder.
EXTRACTS = {"star": "star.parquet"}


def write_star_extracts(out_dir: str | Path) -> dict[str, Path]:
    """Write each STAR site's records to ``<out_dir>/<site>/star.parquet`` (folders created;
    existing files replaced); returns the file of each site, in
    :data:`~dpate.data.datasets.STAR_SITES` order.
    Raises :class:`~dpate.data.datasets.DataUnavailableError` (naming ``dpate data fetch
    star``) when the STAR files are not in the data directory."""
    import pandas as pd

    from dpate.data.datasets import STAR_SCORE_RANGE, load_star

    ds = load_star()
    lo, hi = STAR_SCORE_RANGE
    paths = {}
    for name, idx in zip(ds.site_names, ds.site_indices(), strict=True):
        folder = Path(out_dir) / name
        folder.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame(
            {"small_class": ds.w[idx].astype("int64"), "math_score": lo + ds.y[idx] * (hi - lo)}
        )
        frame.to_parquet(folder / EXTRACTS["star"], index=False)
        paths[name] = folder / EXTRACTS["star"]
    return paths
