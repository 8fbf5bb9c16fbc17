"""A layout's field names: what a kernel and every generated C, OpenCL C, CUDA and HIP text can
carry is accepted, anything else is a TypeError when the class is made (issue 38 item 11: ``''``,
``'x y'``, ``'a-b'`` and ``'é'`` were accepted and failed later, as an AttributeError, a build error
or NVRTC's "unrecognized token"; ``p`` next to ``p_pitch`` gave two kernel parameters one name)."""

import numpy as np
import pytest

import portable as pk
import soa


def _layout(fields, base=soa.Layout):
    return type("Named", (base,), fields)


@pytest.mark.parametrize(
    "name, why, fix",
    [
        ("", "is empty", "x"),
        ("x y", "is not a Python identifier", "x_y"),
        ("a-b", "is not a Python identifier", "a_b"),
        ("1x", "is not a Python identifier", "f_1x"),
        ("é", "is not ASCII", "f_"),
        ("xé", "is not ASCII", "x_"),
        ("if", "is a Python keyword", "f_if"),
        ("None", "is a Python keyword", "f_None"),
    ],
)
def test_a_name_kernels_cannot_carry_is_refused_when_the_class_is_made(name, why, fix):
    with pytest.raises(TypeError) as err:
        _layout({"ok": soa.column(np.float32), name: soa.column(np.float32)})
    assert f"Named: field name {name!r} {why}" in str(err.value)
    assert f"rename the field, e.g. to {fix!r}" in str(err.value)


@pytest.mark.parametrize(
    "fields, clash",
    [
        (
            {"p": soa.vector(np.float32, 3), "p_pitch": soa.column(np.float32)},
            "'p_pitch' is field 'p' followed by '_pitch'",
        ),
        ({"c_pitch": soa.column(np.float32), "c": soa.matrix(np.float32, 2, 2)}, "'c_pitch' is field 'c'"),
        ({"x": soa.column(np.float64), "x_e0": soa.column(np.float64)}, "extent parameter"),
        ({"x": soa.column(np.float64), "x_buf": soa.scalar(np.int32)}, "OpenCL buffer parameter"),
        ({"x_off": soa.column(np.float64), "x": soa.column(np.int64)}, "OpenCL offset parameter"),
    ],
)
def test_a_name_that_is_another_fields_generated_parameter_is_refused(fields, clash):
    with pytest.raises(TypeError, match="two parameters of one name") as err:
        _layout(fields)
    assert clash in str(err.value)


def test_the_clash_is_found_across_a_subclass():
    base = _layout({"p": soa.vector(np.float32, 3)})
    with pytest.raises(TypeError, match="'p_pitch' is field 'p'"):
        _layout({"p_pitch": soa.column(np.float32)}, base)


class Close(soa.Layout):
    """Names next to the refused ones: soft keywords, C and OpenCL C keywords, the generated
    suffixes with something after them, a field called like a suffix alone."""

    match = soa.column(np.float32)
    int = soa.column(np.int32)
    kernel = soa.column(np.float64)
    global_ = soa.column(np.float64)
    p = soa.vector(np.float64, 3)
    p_pitches = soa.column(np.float64)
    pitch = soa.column(np.float64)
    x_e = soa.column(np.float64)
    x_buffer = soa.column(np.float64)
    x_e0x = soa.column(np.float64)


@pk.device_function
def fill_one(acc, v, i):
    v.p[i, 2] = v.kernel[i] + 1.0
    v.x_e0x[i] = v.pitch[i] * 2.0
    return 0


@pk.kernel
def fill_close(acc, v, n):
    for i in acc.uniform_elements(n):
        v.match[i] = i
        v.int[i] = i * 3
        v.kernel[i] = i + 0.5
        v.global_[i] = v.kernel[i] * 2.0
        v.p[i, 0] = 1.0
        v.p_pitches[i] = 4.0
        v.pitch[i] = 5.0
        v.x_e[i] = 6.0
        v.x_buffer[i] = 7.0
        fill_one(acc, v, i)


def test_names_close_to_the_refused_ones_run_on_every_backend(device, queue):
    n = 7
    c = pk.PortableCollection(Close, n, queue)
    pk.exec(queue, pk.make_workdiv(device, 1, n), fill_close, c.view(), n)
    got = c.to_dict(queue)
    i = np.arange(n)
    np.testing.assert_array_equal(got["match"], i.astype(np.float32))
    np.testing.assert_array_equal(got["int"], 3 * i)
    np.testing.assert_array_equal(got["global_"], 2 * (i + 0.5))
    np.testing.assert_array_equal(got["p"][:, 0], np.ones(n))
    np.testing.assert_array_equal(got["p"][:, 2], i + 1.5)
    for name, value in [("p_pitches", 4.0), ("pitch", 5.0), ("x_e", 6.0), ("x_buffer", 7.0), ("x_e0x", 10.0)]:
        np.testing.assert_array_equal(got[name], np.full(n, value), err_msg=name)
