"""A kernel that runs as long as it is told (``iters`` steps an element): the long launch of the
child processes of the Ctrl-C and exit tests (tests/backends: test_ctrl_c.py, the OpenCL waits,
the Oclgrind Ctrl-C, the cpu_threads pool). Import it after the child's own setup
(``ALPYKA_EMULATE``, the backend registry): it imports portable."""

import portable as pk


@pk.kernel
def spin(acc, out, iters):
    for b in acc.uniform_elements(out.shape[0]):
        s = 0.0
        for _k in range(iters):
            s = s * 0.999999 + 1.0
        out[b] = s
