"""Structure-of-Arrays layouts in the style of CMSSW's SoATemplate.

Declare a layout by subclassing :class:`Layout`; every column is padded to the layout's byte
alignment (128 by default) so that each one starts aligned, exactly as CMSSW computes it::

    import numpy as np, soa

    class Particles(soa.Layout):
        x = soa.column(np.float32)
        momentum = soa.vector(np.float32, 3)
        covariance = soa.matrix(np.float32, 3, 3)
        n_valid = soa.scalar(np.int32)

    Particles.byte_size(1000)
    print(Particles.describe(1000))
"""

from ._fields import Field, column, matrix, scalar, vector
from ._layout import DEFAULT_ALIGNMENT, Layout, Placement, block_offsets, checked_size, round_up
from ._view import View, field_geometry, host_array_factory

__all__ = [
    "DEFAULT_ALIGNMENT",
    "Field",
    "Layout",
    "Placement",
    "View",
    "block_offsets",
    "checked_size",
    "column",
    "field_geometry",
    "host_array_factory",
    "matrix",
    "round_up",
    "scalar",
    "vector",
]
