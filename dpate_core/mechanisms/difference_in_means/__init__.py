"""The DP difference in means for randomized trials (section 3.1.1): noisy arm sums and sums of
squares (and, with private arm sizes, a noisy treated count), pure epsilon-DP.
"""

from ._release import (
    arm_statistics,
    dp_difference_in_means,
    plan_difference_in_means,
    plan_difference_in_means_from_statistics,
)

__all__ = [
    "arm_statistics",
    "dp_difference_in_means",
    "plan_difference_in_means",
    "plan_difference_in_means_from_statistics",
]
