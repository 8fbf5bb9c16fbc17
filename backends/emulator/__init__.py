"""The GPU emulator: the cuda/rocm backends' runtime and the generated CUDA/HIP text run on the
CPU (``ALPYKA_EMULATE``). ``fake_cupy``: cupy's API on host memory; ``fake_cupy_kernels``: kernel
bodies on it and its use as the ``cuda``/``rocm`` backends; ``cuda_on_cpu`` with
``cuda_on_cpu.h``: the generated CUDA/HIP text compiled by the system's C++ compiler and run with
a GPU's block semantics."""
