"""CropFlip: each output image is a window of the padded image, mirrored or not, as drawn."""

from __future__ import annotations

import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn.augment import CropFlip  # noqa: E402


def _by_hand(x, padding, fill, flip, seed):
    """The same draws, image by image: pad, crop at (top, left), mirror."""
    b, c, h, w = x.shape
    g = torch.Generator().manual_seed(seed)
    top = torch.randint(0, 2 * padding + 1, (b, 1), generator=g)
    left = torch.randint(0, 2 * padding + 1, (b, 1), generator=g)
    mirror = torch.rand((b, 1), generator=g) < 0.5 if flip else torch.zeros(b, 1, dtype=bool)
    out = []
    for i in range(b):
        padded = torch.empty(c, h + 2 * padding, w + 2 * padding, dtype=x.dtype)
        for ch in range(c):
            padded[ch] = 0.0 if fill is None else fill[ch]
        padded[:, padding : padding + h, padding : padding + w] = x[i]
        t, left_i = int(top[i]), int(left[i])
        window = padded[:, t : t + h, left_i : left_i + w]
        out.append(window.flip(-1) if bool(mirror[i]) else window)
    return torch.stack(out)


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 5),
    c=st.integers(1, 3),
    h=st.integers(1, 6),
    w=st.integers(1, 6),
    padding=st.integers(0, 3),
    flip=st.booleans(),
    with_fill=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_equals_the_image_by_image_computation(b, c, h, w, padding, flip, with_fill, seed):
    x = torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(seed))
    fill = [float(-k - 1) for k in range(c)] if with_fill else None
    got = CropFlip(padding, fill, flip)(x, torch.Generator().manual_seed(seed))
    assert torch.equal(got, _by_hand(x, padding, fill, flip, seed))
    assert got.shape == x.shape and got.dtype == x.dtype


def test_no_padding_no_flip_is_the_identity_and_flips_mirror():
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float64).reshape(2, 3, 4, 5)
    assert torch.equal(CropFlip(0, flip=False)(x, torch.Generator().manual_seed(0)), x)
    seen = set()
    for seed in range(20):  # padding 0: each image is itself or its mirror image
        out = CropFlip(0)(x, torch.Generator().manual_seed(seed))
        for i in range(2):
            assert torch.equal(out[i], x[i]) or torch.equal(out[i], x[i].flip(-1))
            seen.add(torch.equal(out[i], x[i]))
    assert seen == {True, False}


def test_errors_name_the_problem():
    g = torch.Generator()
    with pytest.raises(ShapeError, match=r"\(B, C, H, W\)"):
        CropFlip()(torch.zeros(3, 4, 4), g)
    with pytest.raises(ShapeError, match="fill has 2 values for 3 channels"):
        CropFlip(fill=[0.0, 0.0])(torch.zeros(1, 3, 4, 4), g)
    with pytest.raises(ParameterError, match="padding"):
        CropFlip(padding=-1)
