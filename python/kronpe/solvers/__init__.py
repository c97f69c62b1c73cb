"""The solvers of the public API: grid fits in closed form (:mod:`.fit`, with the grid handling
of :mod:`.grid` and the GCV searches of :mod:`.gcv`), the blending matrix of scattered points
(:mod:`.blending`) and the exact scattered fit (:mod:`.points`). Their public names are
exported at the top level (``kronpe.fit_grid``, ``kronpe.GridPlan``, ``kronpe.BlendingMatrix``,
``kronpe.fit_points``, ...)."""
