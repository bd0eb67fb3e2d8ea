"""Plug the reference allocators into real libraries.

* :mod:`.cupy` -- ``use(allocator)``: CuPy allocates through any reference
  allocator via ``cupy.cuda.set_allocator`` (CuPy is imported lazily).
* :mod:`.cupy_standin` -- a CuPy-free stand-in with the same calls, so the
  hook runs (and is tested) on the simulated device without a GPU.
"""
