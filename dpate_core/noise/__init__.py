"""Noise samplers: secure ones for releases, seeded ones for simulations.

``rng=None`` (every real release) draws through OpenDP's Laplace and Gaussian measurements, or for
integer statistics through the exact, vectorised discrete Laplace sampler
(:func:`discrete_laplace_vector`, from the operating system's secure source); a
``numpy.random.Generator`` is for simulations only. :func:`analytic_gaussian_sigma` calibrates the
Gaussian mechanism for every epsilon (Balle and Wang 2018).
"""

from ._discrete_laplace import MAX_NUMERATOR, discrete_laplace_vector, fits, secure_words
from ._samplers import (
    Rng,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    gaussian,
    integer_laplace_vector,
    laplace,
    laplace_vector,
)

__all__ = [
    "MAX_NUMERATOR",
    "Rng",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "discrete_laplace_vector",
    "fits",
    "gaussian",
    "integer_laplace_vector",
    "laplace",
    "laplace_vector",
    "secure_words",
]
