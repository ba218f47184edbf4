"""The three shared helpers of riemfl.backend: is_torch, to_numpy, as_generator."""

import numpy as np
import pytest

from riemfl.backend import as_generator, is_torch, to_numpy
from riemfl.errors import ParameterError
from riemfl.testing import importorskip


def test_to_numpy_passes_numpy_through_and_converts_scalars_and_lists():
    a = np.arange(6.0).reshape(2, 3)
    assert to_numpy(a) is a
    assert to_numpy(a, np.float32).dtype == np.float32
    assert to_numpy(2.5).shape == () and to_numpy(2.5) == 2.5
    np.testing.assert_array_equal(to_numpy([[1, 2], [3, 4]], np.float64), [[1.0, 2.0], [3.0, 4.0]])


def test_to_numpy_detaches_torch_and_keeps_dtype_unless_asked():
    torch = importorskip("torch")
    t = torch.arange(4.0, dtype=torch.float32, requires_grad=True) * 2
    out = to_numpy(t)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0, 6.0])
    assert to_numpy(t, np.float64).dtype == np.float64
    assert is_torch(t) and is_torch(torch.nn.Parameter(torch.zeros(2)))
    assert not is_torch(out) and not is_torch([1.0]) and not is_torch(None)


def test_as_generator_treats_none_int_and_generator_one_way():
    gen = np.random.default_rng(3)
    assert as_generator(gen) is gen
    assert as_generator(5).random() == np.random.default_rng(5).random()
    assert as_generator(np.int64(5)).random() == np.random.default_rng(5).random()
    fresh = as_generator(None)
    assert isinstance(fresh, np.random.Generator) and fresh is not as_generator(None)


@pytest.mark.parametrize("bad", [True, 1.5, "seed", np.random.RandomState(0)])
def test_as_generator_rejects_anything_else_with_a_typed_error(bad):
    with pytest.raises(ParameterError, match="where: rng must be None, an int seed or a numpy"):
        as_generator(bad, name="where")
