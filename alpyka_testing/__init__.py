"""The support code of alpyka's own test suite (as torch.testing._internal is torch's): the cupy
stand-in, the kernels and models several test files share, the suite's pytest plugins and caches.
It is the suite's, not a user's API: it may change with any test. The library never imports it
(portable, backends, soa, inference and alpyka_demo; not the public pytest plugin
portable.testing.plugin either: tests/portable/test_layering.py), and importing this package
imports none of its modules.

Laid out after the library and tests/ (CONTRIBUTING.md, "The support package"):

- ``backends``: torch's CUDA device on the GPU emulator (``standin_torch``; the emulator that runs
  the matrix's ``cuda``/``rocm`` rows without a GPU is the installed backends/emulator/) and the
  multi-thread block kernels of the backend tests (``blocks``);
- ``kernels``: kernels and helpers the kernel tests (tests/kernels) share;
- ``inference``: the layouts and small torch models of the inference tests;
- ``data``: the event kernels of examples/dimuon_mass.py for the data tests;
- ``bench``: running and importing the benchmark scripts (benchmarks/ is not a package);
- ``hang_guard``: the pytest plugin that fails a run hung outside any test;
- ``opencl_rows``: the plugin that keeps the OpenCL rows only (the sanitizer pass's child run);
- ``artifact_cache``: slow test artifacts cached by content under $ALPYKA_CACHE_DIR.

``data`` and ``bench`` reach examples/ and benchmarks/ beside this package: a source checkout.
"""
