"""An independent float64 numpy version of the split-Sinkhorn op, for tests.

Written from the model's description (sigmoid via logaddexp, the scales broadcast
by repeat, the whole batch at once), not from the project's code, so a slip in
one is not mirrored in the other.
"""

import numpy as np


def split_sinkhorn_f64(mixes, scale, base, hc, iters=20, eps=1e-6):
    """float64 numpy: (pre [n, hc], post [n, hc], comb [n, hc, hc]) for mixes [..., (2+hc)*hc]."""
    m = np.asarray(mixes, dtype=np.float64).reshape(-1, (2 + hc) * hc)
    s = np.repeat(np.asarray(scale, dtype=np.float64), [hc, hc, hc * hc])
    z = m * s + np.asarray(base, dtype=np.float64)
    sigmoid = lambda x: np.exp(-np.logaddexp(0.0, -x))  # noqa: E731
    pre = sigmoid(z[:, :hc]) + eps
    post = 2.0 * sigmoid(z[:, hc : 2 * hc])
    c = z[:, 2 * hc :].reshape(-1, hc, hc)
    c = np.exp(c - c.max(axis=2, keepdims=True))
    c = c / c.sum(axis=2, keepdims=True) + eps
    c = c / (c.sum(axis=1, keepdims=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(axis=2, keepdims=True) + eps)
        c = c / (c.sum(axis=1, keepdims=True) + eps)
    return pre, post, c
