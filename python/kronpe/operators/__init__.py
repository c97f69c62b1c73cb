"""Linear operators of the public API: the blending matrix of scattered points on a virtual grid
(:mod:`.blending`, ``kronpe.BlendingMatrix``) and the difference penalties of the weights
(:mod:`.penalty`, ``kronpe.DifferencePenalty``). The solvers build on them."""
