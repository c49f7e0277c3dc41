"""The propensity release's model, fitted to the noisy model vector of :mod:`._model`
(post-processing; ``docs/research/propensity.md``, design step 1).

Arm log-odds ``log(n_1 / n_0)``; per categorical level the log ratio
of its smoothed noisy arm frequencies; per numeric covariate the linear discriminant term
``u (m_1 - m_0) / s^2 - (m_1^2 - m_0^2) / (2 s^2)`` from the noisy arm means and pooled variance.
The index of a record is the sum of its terms (:meth:`PropensityModel.index`); the public band
edges are the ``k / K`` quantiles of the index under the model's own distribution (per arm a normal
with the summed per-covariate means and variances, mixed by the noisy arm shares), or, from the
public size :data:`~._band_edges.OVERLAP_FROM`, of the arms' overlap density under it
(:meth:`PropensityModel.edges`, :mod:`._band_edges`).

The noise share (:attr:`PropensityModel.noise_share`, what the attenuation correction reads) is the
share of the index's variance that is model noise *across* the true index. Per covariate ``j``
the delta method gives the noise ``eta_j`` its term carries (``n_j = Var eta_j`` over the
records); the part of the index noise along the true index ``I* = sum_j t_j`` is
``E[Cov(eta, I*)^2] / Var I* = sum_j E[Cov(eta_j, t_j)^2] / sum_j Var t_j`` (covariates
independent, as in the model's own distribution): categorical
``sum_l pi_l^2 v_l (t_l - tbar)^2``, numeric ``Var(slope) slope^2 s^4``, each true term's square
estimated by the noisy one's less its noise variance (clipped at 0). Noise along ``I*`` only
rescales it and leaves the bands' order of the records, and so the confounding they remove,
unchanged; only the rest attenuates. The share is ``(index noise - along) / spread``
(docs/research/propensity.md, design step 4; with one covariate it is 0: its slope's noise
cannot reorder the records).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._band_edges import (
    band_edges,
    filled_edges,
    residual_confounding_share,
    residual_multiple,
)
from ._model import Categorical, Column

__all__ = ["PropensityModel", "fit_model"]


@dataclass(frozen=True)
class PropensityModel:
    """The fitted additive logit (module docstring): ``intercept`` plus, per covariate, a term
    table (categorical: one value per level) or ``(slope, offset)`` in ``u`` (numeric); and, per
    arm, the mean and variance of each covariate's term (the model's distribution of the index).
    """

    columns: tuple[Column, ...]
    intercept: float
    terms: tuple[np.ndarray, ...]
    arm_share: float  # the noisy treated share
    means: np.ndarray  # (2,): the index's mean in control, treated
    variances: np.ndarray  # (2,)
    #: the share of the index's variance that is the model's noise across the true index (delta
    #: method at the noisy point, over the model's distribution of records; module docstring),
    #: in [0, 1]
    noise_share: float = 0.0
    #: whether its bands are of equal overlap mass (public: ``N x epsilon_model`` from
    #: :data:`~._band_edges.OVERLAP_FROM`, :func:`~._band_edges.overlap_bands`; set by
    #: :func:`~._bands.model_fit`) or equally filled
    overlap: bool = False

    def index(self, z: np.ndarray) -> np.ndarray:
        """The linear index of records ``z`` (``(N, p)``; numeric columns as values)."""
        eta = np.full(z.shape[0], self.intercept)
        for j, (col, term) in enumerate(zip(self.columns, self.terms, strict=True)):
            if isinstance(col, Categorical):
                eta += term[np.asarray(z[:, j]).astype(np.int64)]
            else:
                mid, half = (col.lo + col.hi) / 2.0, (col.hi - col.lo) / 2.0
                u = np.clip((np.asarray(z[:, j], dtype=np.float64) - mid) / half, -1.0, 1.0)
                eta += term[0] * u + term[1]
        return eta

    def edges(self, bands: int) -> np.ndarray:
        """The ``bands - 1`` inner edges: where :attr:`overlap`, the ``k / bands`` quantiles of
        the arms' overlap density under the model's distribution
        (:func:`~._band_edges.band_edges`); else the ``k / bands`` quantiles of the index's model
        distribution, two normals mixed by the arm shares (:func:`~._band_edges.filled_edges`)."""
        if self.overlap:
            return band_edges(self.means, self.variances, bands)
        return filled_edges(self.means, self.variances, self.arm_share, bands)

    def residual_multiple(self, edges: np.ndarray) -> float:
        """The shared sd's multiple of the confounding the corrected estimate removes, for the
        bands of inner ``edges`` (:meth:`edges`): where :attr:`overlap`, what they leave of a
        confounder linear in the index over what they remove, under its distribution
        (:func:`~._band_edges.residual_multiple`); else Cochran's share for that many equally
        filled bands (:func:`~._band_edges.residual_confounding_share`), as until stop 52."""
        if not self.overlap:
            return residual_confounding_share(len(edges) + 1)
        return float(residual_multiple(self.means, self.variances, self.arm_share, edges))


def fit_model(
    noisy: np.ndarray, columns: Sequence[Column], g: int, n: int, smoothing: float
) -> PropensityModel:
    """The model from one noisy model vector in outcome units (the grid unit already applied:
    counts are counts, sums are sums of ``u``). ``smoothing``: the pseudo-count added to every
    noisy (level, arm) count, clipped at 0 first (a public constant, of the order of the noise
    scale). Post-processing only."""
    v = np.asarray(noisy, dtype=np.float64)
    v_count = 2.0 * smoothing * smoothing  # each entry's noise variance (smoothing = its scale)
    index_noise = along = signal = 0.0  # module docstring: the noise share
    arm = np.maximum(v[:2], 1.0)
    share = float(arm[1] / arm.sum())
    intercept = math.log(arm[1] / arm[0])
    terms: list[np.ndarray] = []
    means = np.array([0.0, 0.0]) + intercept
    variances = np.zeros(2)
    at = 2
    for col in columns:
        block = v[at : at + col.width]
        at += col.width
        if isinstance(col, Categorical):
            cells = np.maximum(block.reshape(col.levels, 2), 0.0) + smoothing
            freq = cells / cells.sum(axis=0, keepdims=True)
            term = np.log(freq[:, 1]) - np.log(freq[:, 0])
            terms.append(term)
            mix = (1 - share) * freq[:, 0] + share * freq[:, 1]
            v_level = v_count * (1 / cells[:, 0] ** 2 + 1 / cells[:, 1] ** 2)
            index_noise += float(mix @ v_level)
            t2 = np.maximum((term - float(mix @ term)) ** 2 - v_level, 0.0)  # de-noised
            along += float((mix * mix * v_level) @ t2)
            signal += float(mix @ t2)
            for a in (0, 1):
                m = float(freq[:, a] @ term)
                means[a] += m
                variances[a] += float(freq[:, a] @ (term - m) ** 2)
        else:
            m_arm = np.clip(block[:2] / arm, -1.0, 1.0)
            pooled = (block[2] - float(np.sum(block[:2] ** 2 / arm))) / float(n)
            s2 = float(np.clip(pooled, 1e-2, 1.0))
            slope = float((m_arm[1] - m_arm[0]) / s2)
            offset = float(-(m_arm[1] ** 2 - m_arm[0] ** 2) / (2.0 * s2))
            terms.append(np.array([slope, offset]))
            v_slope = v_count * float(np.sum(1.0 / arm**2)) / (s2 * s2)
            index_noise += v_slope * s2  # Var(slope) E[u^2]
            t2 = max(slope * slope - v_slope, 0.0) * s2  # de-noised
            along += v_slope * s2 * t2
            signal += t2
            for a in (0, 1):
                means[a] += slope * m_arm[a] + offset
                variances[a] += slope * slope * s2
    spread = (1 - share) * variances[0] + share * variances[1]
    spread += share * (1 - share) * float(means[1] - means[0]) ** 2
    across = index_noise - (along / signal if signal > 0.0 else 0.0)
    noise_share = min(1.0, max(across, 0.0) / max(spread, 1e-12))
    return PropensityModel(
        tuple(columns), intercept, tuple(terms), share, means, variances, noise_share
    )
