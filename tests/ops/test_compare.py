"""ops/compare.py, the one element-by-element comparison: what a difference is (NaN on both sides
none, on one side one, equal infinities 0 apart, -0.0 not the same bits as +0.0), and that diff, the
golden files and check-port, each through it, judge one pair of arrays alike."""

import numpy as np

from hccli.ops.compare import gaps, same_bits

NAN, INF = float("nan"), float("inf")
A = np.array([1.0, NAN, NAN, INF, INF, 0.0, 2.0, -1.0], dtype=np.float32)
B = np.array([1.5, NAN, 3.0, INF, 5.0, -0.0, 2.0, -1.25], dtype=np.float32)


def test_what_a_difference_is():
    c = gaps(A, B)
    assert c.gap[[0, 1, 3, 5, 6]].tolist() == [0.5, 0.0, 0.0, 0.0, 0.0]  # both NaN, inf == inf, -0.0 == 0.0
    assert np.isnan(c.gap[2]) and c.gap[4] == INF and c.gap[7] == 0.25
    assert c.lone_nan.tolist() == [False, False, True, False, False, False, False, False]
    assert c.keep.sum() == 6 and c.max_kept() == INF
    assert c.differing == 5  # 1.5, the lone NaN, inf vs 5, the sign of zero, -1.25; not the two NaNs
    assert not same_bits(A[5:6], B[5:6]) and same_bits(A[:2], A[:2].copy())
    assert gaps(A[1:3], A[1:3]).max_kept() == 0.0  # no element NaN on neither side


def test_diff_the_goldens_and_check_port_judge_alike():
    from hccli.diffing.values import compare_arrays
    from hccli.port.expect import check
    from hccli.runkernel.golden import diff

    rng = np.random.default_rng(0)
    a = rng.standard_normal(4000).astype(np.float32)
    b = a + rng.standard_normal(4000).astype(np.float32) * np.float32(1e-3)
    b[::97], a[::389] = NAN, NAN
    a[5], b[5] = INF, INF
    atol = 1e-3
    mx, _, beyond, same, _ = compare_arrays(a, b, atol, 0.0)
    golden = diff(b, a, atol)
    port = check("0.attn", "post", b, a, np.full(a.shape, atol))
    assert not same and np.isnan(mx)  # diff: a NaN on one side makes the largest difference NaN
    assert beyond == golden.beyond_atol == port.beyond > (np.isnan(a) ^ np.isnan(b)).sum()
    assert golden.max_abs_diff == port.max_abs > 0 and golden.differing == port.differing
    keep = ~(np.isnan(a) | np.isnan(b))
    assert compare_arrays(a[keep], b[keep], atol, 0.0)[0] == golden.max_abs_diff
