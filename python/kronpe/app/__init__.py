"""The application layer: the ``kronpe`` command line (:mod:`.cli`), its commands (:mod:`.fit_cmd`,
:mod:`.demo`, :mod:`.analyze`) and the papers' evaluation protocol (:mod:`.protocol`) that they,
the benchmarks and :mod:`kronpe.torch.train` share. Nothing below this layer imports it."""
