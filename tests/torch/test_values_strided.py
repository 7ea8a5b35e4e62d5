"""A permuted tensor view crosses as its memory and its strides (values.py, `fills_its_span`),
a permuted numpy array as the C-ordered array it permutes: no contiguous copy on the sending
side, and the receiver gets the layout the sender had, as a node in process hands it on.
tests/python_host/test_values.py carries both through a worker."""

import os

import numpy
import pytest
import torch

from isohost_worker import values


class Peer:
    open = True


def cross(value):
    """`value` encoded and decoded in this process, as a sender and a receiver do."""
    peer = Peer()
    with values.encode(value, peer) as encoded:
        return values.decode(encoded.description, [os.dup(fd) for fd in encoded.fds], peer)


def nchw(n, c, h, w):
    return torch.arange(n * c * h * w, dtype=torch.float32).reshape(n, c, h, w)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: nchw(1, 3, 512, 256).permute(0, 2, 3, 1), id="nchw-as-nhwc"),
    pytest.param(lambda: nchw(2, 3, 256, 128).movedim(1, -1), id="batch-movedim"),
    pytest.param(lambda: nchw(1, 3, 8, 8).permute(0, 2, 3, 1), id="small-in-the-stream"),
    pytest.param(lambda: torch.arange(300_000.0).reshape(600, 500).t(), id="transpose"),
    pytest.param(lambda: nchw(1, 1, 600, 300).permute(3, 1, 0, 2), id="sizes-of-one"),
])
def test_a_permuted_view_arrives_with_its_strides_and_values(make):
    view = make()
    assert not view.is_contiguous()
    got, = cross((view,))
    assert got.stride() == view.stride() and got.shape == view.shape
    assert torch.equal(got, view)
    assert got.untyped_storage().nbytes() == view.numel() * view.element_size()


@pytest.mark.parametrize("make", [
    pytest.param(lambda: nchw(1, 3, 256, 256)[:, :, ::2], id="stepped"),
    pytest.param(lambda: torch.arange(1000.0).expand(300, 1000), id="broadcast"),
    pytest.param(lambda: torch.arange(100_000.0).as_strided((500, 500), (100, 1)),
                 id="overlapping"),
    pytest.param(lambda: nchw(1, 3, 256, 256)[..., 1:], id="offset-gaps"),
])
def test_a_view_with_gaps_or_overlaps_arrives_contiguous_with_its_values(make):
    view = make()
    got, = cross((view,))
    assert got.is_contiguous() and torch.equal(got, view)
    assert got.untyped_storage().nbytes() == view.numel() * view.element_size()


def test_a_permuted_view_of_part_of_a_tensor_sends_only_its_part():
    """A batch's second image, permuted: its memory starts past the storage's start."""
    base = nchw(4, 3, 128, 128)
    view = base[1:2].permute(0, 2, 3, 1)
    got, = cross((view,))
    assert torch.equal(got, view) and got.stride() == view.stride()
    assert got.untyped_storage().nbytes() == view.numel() * 4


@pytest.mark.parametrize("shape, strides, fills", [
    ((2, 3), (3, 1), True),
    ((2, 3), (1, 2), True),
    ((1, 4, 5, 3), (60, 5, 1, 20), True),
    ((1, 1, 1), (7, 9, 11), True),
    ((4, 1, 2), (2, 99, 1), True),
    ((2, 3), (4, 1), False),  # a gap after each row
    ((2, 3), (0, 1), False),  # broadcast
    ((3, 3), (1, 1), False),  # overlapping
    ((2, 2), (1, 1), False),
    ((2, 3), (2, 1), False),
])
def test_fills_its_span(shape, strides, fills):
    assert values.fills_its_span(shape, strides) is fills


class Forged:
    """A value whose reduction names the rebuild with strides that do not fit its buffer, as a
    broken peer's stream could."""

    def __init__(self, strides, shape=(3, 4)):
        self.strides, self.shape = strides, shape

    def __reduce__(self):
        return (values._rebuild_tensor, (bytearray(48), "float32", list(self.shape), False,
                                         "cpu", self.strides))


@pytest.mark.parametrize("strides, shape", [
    ([4, 2], (3, 4)),  # reads past the buffer
    ([1, 1], (3, 4)),
    ([4], (3, 4)),
    ([-4, 1], (3, 4)),
    (["4", 1], (3, 4)),
    ([1, 3], (3, 5)),  # more elements than the buffer has
])
def test_strides_that_do_not_fit_the_buffer_are_refused(strides, shape):
    with pytest.raises(ValueError, match="strides"):
        cross(Forged(strides, shape))


class ForgedArray:
    def __init__(self, array, axes):
        self.array, self.axes = array, axes

    def __reduce__(self):
        return (values._transposed_array, (self.array, self.axes))


@pytest.mark.parametrize("array, axes", [
    (numpy.zeros((2, 3, 4)), [0, 0, 1]),
    (numpy.zeros((2, 3, 4)), [0, 1]),
    (numpy.zeros((2, 3, 4)), [0, 1, 5]),
    ([[1, 2], [3, 4]], [1, 0]),
])
def test_a_transposed_array_with_bad_axes_or_no_array_is_refused(array, axes):
    with pytest.raises(ValueError):  # numpy's AxisError is one
        cross(ForgedArray(array, axes))
