"""Values between interpreters with different numpy: ComfyUI's (numpy 2) and the pack
environment's (numpy 1.26), through a real worker. numpy 2 pickles its arrays and scalars as
numpy._core's, a module numpy 1 names numpy.core."""

import numpy
import pytest

import isohost
from conftest import PACK_PYTHON


@pytest.fixture(scope="module")
def host():
    with isohost.Host({"env": {"pack": {"python": PACK_PYTHON}}}) as host:
        yield host


def test_the_two_interpreters_have_different_numpy(host):
    assert numpy.__version__.startswith("2.")
    assert host.call("pack", "importlib.metadata:version", "numpy").startswith("1.")


@pytest.mark.parametrize("value", [numpy.arange(5, dtype=numpy.int64), numpy.float64(2.5),
                                   numpy.arange(1 << 16, dtype=numpy.float32)])
def test_a_numpy_2_value_arrives_in_a_numpy_1_worker_and_comes_back(host, value):
    back = host.call("pack", "copy:deepcopy", value)
    assert type(back) is type(value)
    assert numpy.array_equal(back, value)
