"""The application layer: the ``kronpe`` command line (:mod:`.cli`) and its commands
(:mod:`.fit_cmd`, :mod:`.jobs`, :mod:`.demo`, :mod:`.analyze`, :mod:`.bench_cmd`), which run the
papers' evaluation protocol of :mod:`kronpe.bench.protocol` and report through :mod:`.output`.
Nothing below this layer imports it."""
