"""kronpe.torch.modules imports these from here; their home is kronpe.operators.blending."""
from ..operators.blending import BlendingMatrix  # noqa: F401
from ..operators.blending import grid_nodes as _grid_nodes  # noqa: F401
