"""Private adapters between the public API and the compiled core: array descriptors for NumPy,
torch and CuPy arrays (:mod:`.arrays`), the CUDA calls (:mod:`.cuda`), SciPy's BLAS wired into
the core (:mod:`.blas`) and the shared argument checks (:mod:`.validate`). Not public API."""
