"""Where the experiments' sites come from: the data sets (:class:`Dataset`, read through a
:class:`DataSource`), the sites of one random split (:class:`Site`, :class:`Split`) and every
configuration of the paper's section 4 (:func:`build_splits`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpate.experiments.settings import THREE_SITE_PROPORTIONS, ExperimentSettings, seed_key

__all__ = [
    "DataSource",
    "Dataset",
    "Site",
    "Split",
    "build_splits",
    "default_source",
    "proportional_splits",
    "sites_of",
]


@dataclass(frozen=True)
class Site:
    """One site's records: ``w`` (0/1), ``y`` in ``[0, B]``, ``x`` stratum ids (matching only)."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.w.shape[0])


@dataclass(frozen=True)
class Split:
    """A data set divided into sites, with what the experiment needs to know about it.

    ``truth`` is the true ATE when known and used as the reference (Synth); otherwise the reference
    is the non-private estimate of the pooled sites, taken as the ``N_j``-weighted mean of the
    sites' non-private estimates (what the aggregate estimates when no noise is added).
    """

    dataset: str
    proportions: str
    sites: tuple[Site, ...]
    bound: float
    domain_size: int | None = None
    truth: float | None = None

    @property
    def n_sites(self) -> int:
        return len(self.sites)


@dataclass(frozen=True)
class Dataset:
    """A data set mapped to ``(w, y, x)`` with its public constants; ``groups`` holds a site label
    per record where the sites are given (STAR's urbanicity), in ``group_order``."""

    name: str
    w: np.ndarray
    y: np.ndarray
    bound: float
    x: np.ndarray | None = None
    domain_size: int | None = None
    groups: np.ndarray | None = None
    group_order: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataSource:
    """How the run gets its data: ``load(name) -> Dataset``;
    ``synth(n, domain_size, a, seed) -> (w, y, x)`` (``a=None`` draws ``a ~ U[-1, 1]``);
    ``split(n, proportions, seed) -> [index arrays]`` (a seeded random partition)."""

    load: Callable[[str], Dataset]
    synth: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]
    split: Callable[[int, Sequence[int], int], list[np.ndarray]]


def sites_of(ds: Dataset, parts: Sequence[np.ndarray]) -> tuple[Site, ...]:
    """The sites holding the records at each index array of ``parts``."""
    return tuple(Site(ds.w[i], ds.y[i], None if ds.x is None else ds.x[i]) for i in parts)


def proportional_splits(
    ds: Dataset, source: DataSource, settings: ExperimentSettings, truth: float | None = None
) -> list[list[Split]]:
    """``settings.splits`` seeded random partitions for J = 2 (equal) and each J = 3 proportion."""
    out = []
    for prop in ((1, 1), *THREE_SITE_PROPORTIONS):
        label = ":".join(map(str, prop))
        group = []
        for i in range(settings.splits):
            parts = source.split(ds.w.shape[0], prop, seed_key(settings.seed, ds.name, label, i))
            group.append(
                Split(ds.name, label, sites_of(ds, parts), ds.bound, ds.domain_size, truth)
            )
        out.append(group)
    return out


def build_splits(settings: ExperimentSettings, source: DataSource) -> dict[str, list[list[Split]]]:
    """Every configuration of section 4, each a list of random splits: IST (J = 2 equal, J = 3 by
    proportion), STAR (its four urbanicity sites, largest first: one fixed split), Synth, IHDP
    and Lalonde (J = 2 and 3)."""
    splits: dict[str, list[list[Split]]] = {}
    ist = source.load("IST")
    splits["IST"] = proportional_splits(ist, source, settings)
    star = source.load("STAR")
    parts = [np.flatnonzero(star.groups == g) for g in star.group_order]
    splits["STAR"] = [[Split("STAR", "urbanicity", sites_of(star, parts), star.bound)]]
    w, y, x = source.synth(
        n=settings.synth_n,
        domain_size=settings.synth_domain,
        a=None,
        seed=seed_key(settings.seed, "synth"),
    )
    synth = Dataset("Synth", w, y, 1.0, x, settings.synth_domain)
    splits["Synth"] = proportional_splits(synth, source, settings, truth=0.5)
    for name in ("IHDP", "Lalonde"):
        splits[name] = proportional_splits(source.load(name), source, settings)
    return splits


def default_source() -> DataSource:
    """The paper's data sets through :func:`dpate.data.datasets.load_dataset` (read in place from
    ``DPATE_DATA_DIR``; Y rescaled by the public constants declared there), the Synth generator
    :func:`dpate_core.synth.synth` and the seeded splitter
    :func:`dpate_core.synth.split_proportions`."""
    from dpate.data.datasets import load_dataset
    from dpate_core.synth import split_proportions, synth

    def load(name: str) -> Dataset:
        d = load_dataset(name.lower())
        groups: Any = None
        order: tuple[str, ...] = ()
        if d.sites is not None:
            groups = np.asarray(d.site_names, dtype=object)[d.sites]
            order = tuple(d.site_names)
        return Dataset(name, d.w, d.y, d.bound, d.x, d.domain_size, groups, order)

    def make_synth(
        n: int, domain_size: int, a: float | None, seed: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = synth(n, domain_size, a=a, seed=seed)
        return s.w, s.y, s.x

    return DataSource(load=load, synth=make_synth, split=split_proportions)
