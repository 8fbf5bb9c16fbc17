"""Support of the backend tests: torch's CUDA device on the GPU emulator (``standin_torch``; the
emulator itself is backends/emulator/), the multi-thread block kernels several test files share
(``blocks``); which OpenCL runtimes are here (``opencl_runtimes``); the OpenCL launch and wait
tests' kernel, fast-launcher probes and ``clWaitForEvents`` stand-in (``opencl_launches``)."""
