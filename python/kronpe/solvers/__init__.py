"""The solvers of the public API. Grid fits: ``fit_grid`` (:mod:`.fit`) over the closed form of
:mod:`.grid_plan` (its model in :mod:`.grid_model`, the grid handling in :mod:`.grid`, the GCV
searches in :mod:`.gcv`). Scattered samples: ``fit_points`` and its table of solvers
(:mod:`.protocol`), the exact ridge fit (:mod:`.points`), the penalised one (:mod:`.penalised`)
and the default smooth fill (:mod:`.smooth`, also of grids with holes), cubic B-splines
(:mod:`.spline`). The operators they build on are in :mod:`kronpe.operators`; the public names
are exported at the top level (``kronpe.fit_grid``, ``kronpe.GridPlan``, ``kronpe.fit_points``,
...)."""
