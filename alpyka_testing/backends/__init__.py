"""Support of the backend tests: the cupy stand-in (``fake_cupy``: cupy's API on host memory;
``fake_cupy_kernels``: kernel bodies on it and its installation as the matrix's ``cuda``/``rocm``
backends; ``cuda_on_cpu`` with ``cuda_on_cpu.h``: the generated CUDA/HIP text compiled for the
CPU; ``standin_torch``: torch's CUDA device on it) and the multi-thread block kernels several
test files share (``blocks``); which OpenCL runtimes are here (``opencl_runtimes``)."""
