"""Kernels the compiler must refuse; each offending line carries a marker comment."""

import math

import numpy as np

import portable as pk

GLOBAL_ARRAY = np.zeros(4)
GLOBAL_LIST = [1, 2]


def plain_helper(x):
    return x + 1


@pk.kernel
def uses_print(acc, out, n):
    for i in acc.uniform_elements(n):
        print("i =", i, out)  # ERR:print


@pk.kernel
def uses_comprehension(acc, out, n):
    s = sum([i for i in range(n)])  # ERR:comprehension
    out[0] = s


@pk.kernel
def uses_try(acc, out, n):
    try:  # ERR:try
        out[0] = 1
    except Exception:
        pass


@pk.kernel
def returns_value(acc, out, n):
    return n  # ERR:return


@pk.device_function
def recursive(x):
    return recursive(x - 1)  # ERR:recursion


@pk.kernel
def calls_recursive(acc, out, n):
    out[0] = recursive(n)


@pk.kernel
def captures_array(acc, out, n):
    out[0] = GLOBAL_ARRAY[0]  # ERR:closure


@pk.kernel
def captures_list(acc, out, n):
    out[0] = GLOBAL_LIST[0]  # ERR:global


@pk.kernel
def unknown_acc_member(acc, out, n):
    out[0] = acc.warp_idx  # ERR:acc


@pk.kernel
def calls_plain_function(acc, out, n):
    out[0] = plain_helper(n)  # ERR:plain


@pk.kernel
def writes_const_view(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        inp.x[i] = 1.0  # ERR:const


@pk.kernel
def reads_past_end(acc, out, n):
    for i in acc.uniform_elements(n):
        out.x[i + 1] = 1.0


@pk.kernel
def buffer_past_end(acc, buf, n):
    for i in acc.uniform_elements(n):
        buf[i, 2] = 1.0


@pk.kernel
def scaled_copy(acc, out, inp, factor, n):
    for i in acc.uniform_elements(n):
        out.x[i] = inp.x[i] * factor  # ERR:view-arg


@pk.kernel
def fill_array(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = 1.0  # ERR:array-arg


@pk.kernel
def alpaka_style_member(acc, out, n):
    acc.syncBlockThreads()  # ERR:camel


@pk.kernel
def range_of_a_float(acc, out, n):
    for i in range(1.5):  # ERR:range-float
        out[0] = i


@pk.kernel
def range_step_zero(acc, out, n):
    for i in range(0, n, 0):  # ERR:range-step
        out[0] = i


@pk.kernel
def int_of_nan(acc, out, n):
    out[0] = n
    out[1] = int(math.nan)  # ERR:int-nan


@pk.kernel
def range_step_at_run_time(acc, out, start, stop, step):
    for _i in range(start, stop, step):  # ERR:run-time-step
        out[0] = out[0] + 1.0
