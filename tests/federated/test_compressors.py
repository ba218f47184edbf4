"""Upload compressors (riemfl.federated.compression): bit packing, QSGD's unbiasedness and
variance (statistical tests with a stated false-failure probability), top-k selection and error
feedback, PowerSGD on low-rank and zero matrices and its warm start, float16/bfloat16 rounding
against independent computations, exact payload sizes, and the parsing of the forms."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from riemfl.errors import DataError, DTypeError, NonFiniteError, ParameterError, ShapeError
from riemfl.federated.compression import (
    COMPRESSION_FORMS,
    QSGD,
    Cast,
    LowRank,
    TopK,
    make_compressor,
    pack_bits,
    unpack_bits,
)
from riemfl.federated.compression.sparsify import index_dtype
from riemfl.testing import importorskip


def _rngs(m: int, seed: int = 0) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(m)]


def _round_trip(compressor, updates, state=None):
    shape, dtype = updates.shape[1:], updates.dtype
    if state is None:
        state = compressor.initial_state(shape, updates.shape[0], dtype)
    payload, new_state = compressor.encode(updates, state, _rngs(updates.shape[0]))
    return compressor.decode(payload, shape, dtype), payload, new_state


class _TopUniform(np.random.Generator):
    """A generator whose uniforms are all the largest double below 1 (QSGD rounds every entry
    up, the worst case for the level bound)."""

    def random(self, size=None, dtype=np.float64, out=None):
        return np.full(size, np.nextafter(1.0, 0.0))


# ------------------------------------------------------------------------------------- packing
@settings(max_examples=80, deadline=None)
@given(bits=st.integers(1, 8), m=st.integers(1, 4), d=st.integers(0, 40), data=st.data())
def test_pack_unpack_round_trip(bits, m, d, data):
    values = data.draw(hnp.arrays(np.uint8, (m, d), elements=st.integers(0, (1 << bits) - 1)))
    packed = pack_bits(values, bits)
    assert packed.dtype == np.uint8 and packed.shape == (m, math.ceil(d * bits / 8))
    np.testing.assert_array_equal(unpack_bits(packed, bits, d), values)
    # the padding bits of the last byte are zero
    planes = np.unpackbits(packed, axis=1, bitorder="little")
    assert not planes[:, d * bits :].any()


def test_pack_layout_is_little_endian():
    # entries 1, 2, 3 of 2 bits: stream bits 1 0 | 0 1 | 1 1 -> byte 1 + 8 + 16 + 32
    assert pack_bits(np.array([[1, 2, 3]], dtype=np.uint8), 2).tolist() == [[57]]
    row = np.array([[1, 0, 0, 1, 1, 0, 1, 1, 1]], dtype=np.uint8)
    np.testing.assert_array_equal(pack_bits(row, 1), np.packbits(row, axis=1, bitorder="little"))
    np.testing.assert_array_equal(pack_bits(np.array([[7, 200]]), 8), [[7, 200]])


def test_pack_refuses_bad_input():
    with pytest.raises(ParameterError, match=r"\[0, 3\]"):
        pack_bits(np.array([[4]]), 2)
    with pytest.raises(ParameterError, match="bits"):
        pack_bits(np.array([[0]]), 9)
    with pytest.raises(DTypeError):
        pack_bits(np.array([[0.5]]), 2)
    with pytest.raises(ShapeError):
        unpack_bits(np.zeros((1, 2), dtype=np.uint8), 3, 8)


# ---------------------------------------------------------------------------------------- QSGD
def _qsgd_draws(v: np.ndarray, bits: int, n: int, seed: int = 7):
    """n decodes of the vector v, and the payload's norms."""
    stack = np.broadcast_to(v, (n, v.size)).copy()
    payload, _ = QSGD(bits).encode(stack, {}, _rngs(n, seed))
    return QSGD(bits).decode(payload, (v.size,), np.float64), payload["norm"]


def _hoeffding_accepts(draws: np.ndarray, v: np.ndarray, width: float, delta: float) -> bool:
    """Whether every coordinate's sample mean is within Hoeffding's radius of v.

    Each draw of coordinate i lies in an interval of length ``width``, so
    P(|mean_i - v_i| >= t) <= 2 exp(-2 n t^2 / width^2); with a union bound over the d
    coordinates, an unbiased compressor fails this with probability at most ``delta``.
    """
    n, d = draws.shape
    radius = width * math.sqrt(math.log(2 * d / delta) / (2 * n))
    return bool(np.all(np.abs(draws.mean(axis=0) - v) < radius))


V = np.random.default_rng(3).standard_normal(40) * np.geomspace(0.1, 10, 40)


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_qsgd_is_unbiased(bits):
    # False-failure probability (over the seed) <= 1e-6: Hoeffding plus a union bound; a
    # coordinate of Q(v) takes one of two neighbouring levels, norm / s apart.
    s, n = (1 << bits) - 1, 20_000
    draws, norms = _qsgd_draws(V, bits, n)
    np.testing.assert_allclose(norms, np.linalg.norm(V), rtol=1e-15)
    assert _hoeffding_accepts(draws, V, np.linalg.norm(V) / s, delta=1e-6)
    # the same test rejects rounding to the nearest level, or down
    r = s * np.abs(V) / np.linalg.norm(V)
    for biased in (np.round(r), np.floor(r)):
        wrong = np.sign(V) * biased / s * np.linalg.norm(V)
        assert not _hoeffding_accepts(np.broadcast_to(wrong, (n, V.size)), V, 1 / s, 1e-6)


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_qsgd_variance_meets_lemma_3_1(bits):
    # Alistarh et al. 2017, Lemma 3.1: E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2.
    s, n, d = (1 << bits) - 1, 20_000, V.size
    bound = min(d / s**2, math.sqrt(d) / s) * (V @ V)
    r = s * np.abs(V) / np.linalg.norm(V)
    frac = r - np.floor(r)
    exact = (np.linalg.norm(V) / s) ** 2 * np.sum(frac * (1 - frac))  # sum of Bernoulli variances
    assert exact <= bound
    draws, _ = _qsgd_draws(V, bits, n, seed=11)
    errors = np.sum((draws - V) ** 2, axis=1)
    # the sample mean is within 6 standard errors of its expectation (CLT: false failure ~2e-9)
    assert abs(errors.mean() - exact) < 6 * errors.std() / math.sqrt(n)
    # ||mean - v||^2 has expectation <= bound / n; Markov: false failure <= 1e-3
    assert np.sum((draws.mean(axis=0) - V) ** 2) <= 1e3 * bound / n


@settings(max_examples=60, deadline=None)
@given(
    bits=st.integers(1, 8),
    v=hnp.arrays(
        np.float64, st.integers(1, 30), elements=st.floats(-1e300, 1e300, allow_subnormal=True)
    ),
    top=st.booleans(),
)
@example(bits=3, v=np.array([2e-323]), top=False)  # subnormal: 7 * (norm / 7) > norm
def test_qsgd_levels_never_exceed_s(bits, v, top):
    # pack_bits refuses a level >= 2^bits = s + 1, so an out-of-range level fails here
    compressor = QSGD(bits)
    rows = np.stack([v, np.eye(v.size)[0] * v[0]])  # a one-hot row has r = s exactly
    rngs = [_TopUniform(np.random.PCG64(0)) for _ in range(2)] if top else _rngs(2)
    payload, _ = compressor.encode(rows, {}, rngs)
    levels = unpack_bits(payload["levels"], bits, v.size)
    assert levels.max() <= compressor.levels
    decoded = compressor.decode(payload, v.shape, np.float64)
    assert np.all(np.abs(decoded) <= payload["norm"][:, None])
    assert np.all(np.isfinite(payload["norm"]))


def test_qsgd_zero_row_and_float32():
    rows = np.zeros((2, 3, 2), dtype=np.float32)
    rows[1] = np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5
    decoded, payload, state = _round_trip(QSGD(3), rows)
    assert payload["norm"][0] == 0 and state == {}
    np.testing.assert_array_equal(decoded[0], 0)
    assert decoded.dtype == np.float32 and decoded.shape == rows.shape
    np.testing.assert_array_equal(
        np.sign(decoded[1])[decoded[1] != 0], np.sign(rows[1])[decoded[1] != 0]
    )


def test_qsgd_is_reproducible_from_the_generators():
    rows = np.random.default_rng(0).standard_normal((3, 9))
    first = QSGD(2).encode(rows, {}, _rngs(3, 5))[0]
    second = QSGD(2).encode(rows, {}, _rngs(3, 5))[0]
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])


# --------------------------------------------------------------------------------- payload size
def _compressors(shape: tuple[int, ...]) -> list:
    found = [QSGD(1), QSGD(3), QSGD(8), TopK(0.01), TopK(0.5), TopK(1.0)]
    found += [Cast("float16"), Cast("bfloat16")]
    if len(shape) == 2:
        found += [LowRank(r) for r in range(1, min(shape) + 1)]
    return found


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple),
    m=st.integers(1, 3),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_payload_nbytes_is_what_the_arrays_occupy(shape, m, dtype, seed):
    updates = np.random.default_rng(seed).standard_normal((m, *shape)).astype(dtype)
    for compressor in _compressors(shape):
        decoded, payload, _ = _round_trip(compressor, updates)
        spec = compressor.payload_spec(shape, dtype)
        assert set(payload) == set(spec)
        for key, (row_shape, row_dtype) in spec.items():
            assert payload[key].shape == (m, *row_shape) and payload[key].dtype == row_dtype
        assert sum(a.nbytes for a in payload.values()) == m * compressor.payload_nbytes(
            shape, dtype
        )
        assert decoded.shape == updates.shape and decoded.dtype == updates.dtype


def test_payload_sizes_by_hand():
    f64, f32 = np.float64, np.float32
    assert QSGD(4).payload_nbytes((20,), f64) == 8 + 3 + 10
    assert QSGD(3).payload_nbytes((4, 5), f32) == 8 + 3 + 8
    assert TopK(0.3).payload_nbytes((20,), f64) == 6 * (1 + 8)
    # 0.07 * 100 = 7.000000000000001 in floats; k = ceil(7) = 7 from the decimal 0.07
    assert TopK(0.07).payload_nbytes((100,), f32) == 7 * (1 + 4)
    assert TopK(0.5).payload_nbytes((300,), f32) == 150 * (2 + 4)
    assert LowRank(2).payload_nbytes((5, 4), f64) == (5 + 4) * 2 * 8
    assert Cast("float16").payload_nbytes((5, 4), f64) == 40
    assert Cast("bfloat16").payload_nbytes((5, 4), f32) == 40
    assert [index_dtype(d) for d in (1, 256, 257, 65536, 65537)] == [
        np.uint8,
        np.uint8,
        np.uint16,
        np.uint16,
        np.uint32,
    ]


# ---------------------------------------------------------------------------------------- top-k
@settings(max_examples=60, deadline=None)
@given(
    v=hnp.arrays(np.float64, st.integers(1, 30), elements=st.sampled_from([0.0, 1, -1, 2, -3.5])),
    fraction=st.floats(0.01, 1.0),
)
def test_topk_keeps_the_k_largest(v, fraction):
    compressor = TopK(fraction)
    k = max(1, math.ceil(Fraction(repr(fraction)) * v.size))
    # reference: sort by (-|v_i|, i), keep the first k
    expected = sorted(sorted(range(v.size), key=lambda i: (-abs(v[i]), i))[:k])
    decoded, payload, _ = _round_trip(compressor, v[None])
    assert payload["indices"][0].tolist() == expected
    np.testing.assert_array_equal(payload["values"][0], v[expected])
    placed = np.zeros_like(v)
    placed[expected] = v[expected]
    np.testing.assert_array_equal(decoded[0], placed)


def test_topk_ties_go_to_the_lower_index():
    decoded, payload, _ = _round_trip(TopK(0.5), np.array([[1.0, -1.0, 1.0, 0.5]]))
    assert payload["indices"].tolist() == [[0, 1]]
    np.testing.assert_array_equal(decoded, [[1.0, -1.0, 0.0, 0.0]])


def test_topk_error_feedback_by_hand():
    # e' = (v + e) - C(v + e); C(v + e) + e' = v + e exactly
    v = np.array([3.0, -1.0, 0.5, 2.0])
    e = np.array([0.0, 0.5, -1.0, 0.25])
    corrected = v + e  # [3, -0.5, -0.5, 2.25]
    sent, _, _ = _round_trip(TopK(0.5), corrected[None])
    np.testing.assert_array_equal(sent[0], [3.0, 0.0, 0.0, 2.25])
    residual = corrected - sent[0]
    np.testing.assert_array_equal(residual, [0.0, -0.5, -0.5, 0.0])
    np.testing.assert_array_equal(sent[0] + residual, corrected)


def test_topk_decode_refuses_indices_beyond_the_update():
    payload = {"indices": np.array([[9]], dtype=np.uint8), "values": np.array([[1.0]])}
    with pytest.raises(DataError, match="9"):
        TopK(0.1).decode(payload, (5,), np.float64)


# ------------------------------------------------------------------------------------- PowerSGD
def test_powersgd_is_exact_on_a_rank_r_matrix_with_its_row_space():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((9, 3)), rng.standard_normal((7, 3))
    m_matrix = a @ b.T
    warm = b @ rng.standard_normal((3, 3))  # spans the row space of M
    decoded, payload, state = _round_trip(LowRank(3), m_matrix[None], {"q": warm[None]})
    assert np.linalg.norm(decoded[0] - m_matrix) <= 1e-12 * np.linalg.norm(m_matrix)
    np.testing.assert_allclose(payload["p"][0].T @ payload["p"][0], np.eye(3), atol=1e-14)
    np.testing.assert_array_equal(state["q"], payload["q"])


@pytest.mark.parametrize("shape", [(4, 6), (6, 4)])
def test_powersgd_of_full_rank_is_exact(shape):
    m_matrix = np.random.default_rng(1).standard_normal((2, *shape))
    decoded, _, _ = _round_trip(LowRank(min(shape)), m_matrix)
    np.testing.assert_allclose(decoded, m_matrix, atol=1e-12)


def test_powersgd_warm_start_improves_the_error():
    rng = np.random.default_rng(2)
    left, _ = np.linalg.qr(rng.standard_normal((10, 6)))
    right, _ = np.linalg.qr(rng.standard_normal((8, 6)))
    m_matrix = (left * 0.7 ** np.arange(6)) @ right.T
    compressor = LowRank(2, seed=4)
    first, _, state = _round_trip(compressor, m_matrix[None])
    warm, _, _ = _round_trip(compressor, m_matrix[None], state)
    cold, _, _ = _round_trip(compressor, m_matrix[None])
    error = [np.linalg.norm(x[0] - m_matrix) for x in (first, warm, cold)]
    best = np.linalg.norm(0.7 ** np.arange(2, 6))  # Eckart-Young
    assert error[1] < error[0] == error[2] and error[1] >= best * (1 - 1e-12)


def test_powersgd_zero_matrix_decodes_to_zeros():
    compressor = LowRank(2)
    zeros = np.zeros((2, 5, 3))
    decoded, payload, state = _round_trip(compressor, zeros)
    assert np.all(np.isfinite(payload["p"])) and np.all(np.isfinite(state["q"]))
    np.testing.assert_array_equal(decoded, 0)
    # a zero state does not stick: the next non-zero matrix decodes, without NaN
    m_matrix = np.random.default_rng(3).standard_normal((2, 5, 3))
    again, _, _ = _round_trip(compressor, m_matrix, state)
    assert np.all(np.isfinite(again)) and np.linalg.norm(again) > 0


def test_powersgd_initial_state_and_refusals():
    compressor = LowRank(2, seed=5)
    state = compressor.initial_state((4, 3), 3, np.float32)
    expected = np.random.default_rng(5).standard_normal((3, 2)).astype(np.float32)
    assert state["q"].dtype == np.float32 and compressor.state_spec((4, 3)) == {"q": (3, 2)}
    np.testing.assert_array_equal(state["q"], np.broadcast_to(expected, (3, 3, 2)))
    with pytest.raises(ShapeError, match="use qsgd"):
        compressor.payload_spec((12,), np.float64)
    with pytest.raises(ShapeError, match="use qsgd"):
        compressor.encode(np.zeros((1, 2, 2, 2)), {}, [])
    with pytest.raises(ParameterError, match="min"):
        LowRank(4).payload_spec((3, 7), np.float64)
    with pytest.raises(ShapeError, match="state"):
        compressor.encode(np.ones((2, 4, 3)), {}, [])


# ---------------------------------------------------------------------------------------- casts
def _nearest_even(x: float, significant: int, min_exponent: int) -> Fraction:
    """x rounded to a binary format of ``significant`` bits, ties to even, in exact rationals."""
    if x == 0:
        return Fraction(0)
    exponent = math.frexp(x)[1] - 1
    spacing = Fraction(2) ** (max(exponent, min_exponent) - significant + 1)
    return round(Fraction(x) / spacing) * spacing  # Fraction's round: half to even


def _midpoints(values: np.ndarray) -> np.ndarray:
    """The float64 midpoints between each value and the next one up (exact in float64)."""
    up = np.nextafter(values, np.inf)
    return values.astype(np.float64) / 2 + up.astype(np.float64) / 2


@settings(max_examples=50, deadline=None)
@given(v=hnp.arrays(np.float64, 20, elements=st.floats(-65000, 65000, allow_subnormal=True)))
def test_fp16_rounds_to_nearest_even(v):
    grid = np.random.default_rng(0).integers(0, 0x7BFF, 20, dtype=np.uint16).view(np.float16)
    rows = np.stack([v, _midpoints(grid)])  # the second row is all ties
    decoded, payload, _ = _round_trip(Cast("float16"), rows)
    assert payload["values"].dtype == np.float16
    expected = [[float(_nearest_even(x, 11, -14)) for x in row] for row in rows]
    np.testing.assert_array_equal(decoded, expected)
    assert np.all(payload["values"][1].view(np.uint16) % 2 == 0)


@settings(max_examples=50, deadline=None)
@given(v=hnp.arrays(np.float64, 20, elements=st.floats(-3e38, 3e38, allow_subnormal=True)))
def test_bf16_rounds_float64_once_to_nearest_even(v):
    tiny = np.random.default_rng(1).standard_normal(20) * 2.0**-130  # bfloat16 subnormals
    grid = np.random.default_rng(3).integers(0, 0x7F7F, 20, dtype=np.uint16)
    ties = (grid.astype(np.uint32) << 16 | 0x8000).view(np.float32).astype(np.float64)
    rows = np.stack([v, tiny, ties, np.full(20, 1 + 2.0**-8 + 2.0**-30)])
    decoded, payload, _ = _round_trip(Cast("bfloat16"), rows)
    assert payload["values"].dtype == np.uint16
    expected = [[float(_nearest_even(x, 8, -126)) for x in row] for row in rows]
    np.testing.assert_array_equal(decoded, expected)
    assert np.all(payload["values"][2] % 2 == 0)
    assert decoded[3, 0] == 1 + 2.0**-7  # once rounded; through float32 it would be 1


def test_bf16_of_float32_matches_torch():
    torch = importorskip("torch")
    rng = np.random.default_rng(4)
    normal = (rng.standard_normal(5000) * np.exp(rng.uniform(-80, 80, 5000))).astype(np.float32)
    bits = rng.integers(0, 0x7F7F, 5000, dtype=np.uint32) << 16
    ties = (bits | 0x8000).view(np.float32)
    low = rng.integers(0, 1 << 23, 5000, dtype=np.uint32).view(np.float32)  # subnormals
    v = np.concatenate([normal, ties, -ties, low, np.float32([0.0, -0.0])])
    _, payload, _ = _round_trip(Cast("bfloat16"), v[None])
    reference = torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(payload["values"][0], reference)


@pytest.mark.parametrize(
    "precision, largest, fits, overflows",
    [
        ("float16", 65504.0, 65519.99, 65520.0),
        (
            "bfloat16",
            float.fromhex("0x1.fep127"),
            2.0**128 - 2.0**119 - 2.0**100,
            2.0**128 - 2.0**119,
        ),
    ],
)
def test_casts_refuse_overflow(precision, largest, fits, overflows):
    compressor = Cast(precision)
    decoded, _, _ = _round_trip(compressor, np.array([[fits, -fits]]))
    np.testing.assert_array_equal(decoded, [[largest, -largest]])
    with pytest.raises(
        NonFiniteError, match=rf"largest magnitude .*{re.escape(f'{largest:.9g}')}.*row 1"
    ):
        compressor.encode(np.array([[1.0, 2.0], [3.0, -overflows]]), {}, [])


# --------------------------------------------------------------------------------------- common
def test_encode_refuses_bad_updates():
    with pytest.raises(NonFiniteError, match="row 1"):
        TopK(0.5).encode(np.array([[1.0, 2.0], [np.nan, 0.0]]), {}, [])
    with pytest.raises(DTypeError):
        QSGD(2).encode(np.ones((1, 3), dtype=np.float16), {}, _rngs(1))
    with pytest.raises(ParameterError, match="rngs"):
        QSGD(2).encode(np.ones((2, 3)), {}, _rngs(1))
    with pytest.raises(ShapeError):
        Cast("float16").encode(np.ones((2, 0)), {}, [])
    with pytest.raises(DTypeError):
        QSGD(2).decode(
            {"norm": np.ones(1), "signs": np.zeros((1, 1)), "levels": np.zeros((1, 1))},
            (3,),
            np.float64,
        )
    with pytest.raises(ShapeError, match="keys"):
        Cast("float16").decode({"v": np.ones((1, 3), np.float16)}, (3,), np.float64)


def test_unbiased_flags():
    flags = {c.name: c.unbiased for c in _compressors((3, 3))}
    assert flags == {"qsgd": True, "topk": False, "fp16": False, "bf16": False, "rank": False}


# ------------------------------------------------------------------------------ make_compressor
@pytest.mark.parametrize(
    "spec, expected",
    [
        ("none", None),
        ("fp16", {"name": "fp16", "precision": "float16"}),
        ("bf16", {"name": "bf16", "precision": "bfloat16"}),
        ("qsgd:4", {"name": "qsgd", "bits": 4}),
        (" qsgd:1 ", {"name": "qsgd", "bits": 1}),
        ("topk:0.01", {"name": "topk", "fraction": 0.01}),
        ("topk:1", {"name": "topk", "fraction": 1.0}),
        ("topk:5e-3", {"name": "topk", "fraction": 0.005}),
        ("rank:2", {"name": "rank", "rank": 2, "seed": 0}),
    ],
)
def test_make_compressor_parses_every_form(spec, expected):
    compressor = make_compressor(spec)
    if expected is None:
        assert compressor is None
    else:
        assert compressor.describe() == expected
        assert json.loads(json.dumps(compressor.describe())) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "zip",
        "qsgd",
        "qsgd:",
        "qsgd:0",
        "qsgd:9",
        "qsgd:2.5",
        "qsgd:-1",
        "topk:0",
        "topk:1.5",
        "topk:nan",
        "topk:inf",
        "rank:0",
        "rank:x",
        "fp16:2",
        "none:1",
        "QSGD:4",
        4,
        None,
    ],
)
def test_make_compressor_refuses_bad_forms(spec):
    with pytest.raises(ParameterError) as caught:
        make_compressor(spec)
    assert all(form in str(caught.value) for form in COMPRESSION_FORMS)
    assert repr(spec) in str(caught.value)
