"""attncheck.softmax_norms: the exact norms against PyTorch autograd's Jacobian, on constructed cases with known
answers, on every input layout, and its errors."""
import math

import numpy as np
import pytest

import attncheck

RNG_SEED = 20261121


def autograd_norms(torch, logits, attended=None):
    """Per row ||softmax(row)|| and ||d softmax(row) / d row||_F from torch.autograd's dense Jacobian (float64)."""
    z = torch.tensor(logits, dtype=torch.float64)
    keep = torch.ones_like(z, dtype=torch.bool) if attended is None else torch.tensor(attended)
    f = lambda t: torch.softmax(t.masked_fill(~keep, -math.inf), dim=-1)
    jac = torch.autograd.functional.jacobian(f, z)  # (N, M, N, M); rows do not mix
    n = z.shape[0]
    row_grad = np.array([jac[i, :, i, :].norm().item() for i in range(n)])
    return f(z).norm(dim=-1).numpy(), row_grad, jac.norm().item()


def test_equals_autograd_jacobian_with_and_without_mask():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(RNG_SEED)
    for n, m, sd in [(5, 5, 1.0), (6, 9, 4.0), (8, 3, 0.05)]:
        logits = sd * rng.standard_normal((n, m))
        attended = rng.random((n, m)) < 0.7
        attended[:, 0] = True  # no row without an entry
        for mask in (None, attended):
            ours = attncheck.softmax_norms(logits, mask=mask)
            row_softmax, row_grad, grad = autograd_norms(torch, logits, mask)
            np.testing.assert_allclose(ours["row_softmax_fro"], row_softmax, rtol=1e-10, atol=0)
            np.testing.assert_allclose(ours["row_grad_fro"], row_grad, rtol=1e-10, atol=0)
            assert ours["grad_fro"] == pytest.approx(grad, rel=1e-10)
            assert ours["softmax_fro"] == pytest.approx(np.linalg.norm(row_softmax), rel=1e-10)
            assert (ours["N"], ours["M"]) == (n, m)


def test_known_answers_one_hot_and_two_equal_top_rows_reach_the_bounds():
    n = 16
    one_hot = np.zeros((n, n))
    one_hot[np.arange(n), np.arange(n)] = 1e3  # every other probability is e^-1000 = 0 in double
    r = attncheck.softmax_norms(one_hot)
    assert r["softmax_fro"] == pytest.approx(math.sqrt(n), rel=1e-15)
    assert r["softmax_over_sqrt_N"] == pytest.approx(1.0, rel=1e-15)
    assert r["grad_fro"] == 0.0
    two_top = np.full((n, n), -40.0)
    two_top[:, :2] = 0.0  # two equal top logits, the rest 40 below: the exact sup sqrt(N)/2 (fact 2)
    r = attncheck.softmax_norms(two_top)
    assert r["grad_over_half_sqrt_N"] == pytest.approx(1.0, rel=1e-12)
    assert r["grad_over_2sqrt_N"] == pytest.approx(0.25, rel=1e-12)
    assert r["sqrt_N"] == math.sqrt(n)
    # A uniform row: ||s||^2 = 1/M, ||J||^2 = 1/M - 1/M^2 (sum s^2 - 2 sum s^3 + (sum s^2)^2).
    r = attncheck.softmax_norms(np.zeros((3, 10)))
    np.testing.assert_allclose(r["row_softmax_fro"], math.sqrt(0.1), rtol=1e-15)
    np.testing.assert_allclose(r["row_grad_fro"], math.sqrt(0.1 - 0.01), rtol=1e-14)


def test_a_batch_is_the_matrices_one_by_one_and_every_layout_gives_the_same_numbers():
    rng = np.random.default_rng(RNG_SEED + 1)
    batch = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    mask = np.tril(np.ones((5, 7), dtype=bool))  # broadcast over the batch
    together = attncheck.softmax_norms(batch, mask=mask)
    assert together["softmax_fro"].shape == (2, 3)
    assert together["row_grad_fro"].shape == (2, 3, 5)
    for i in range(2):
        for j in range(3):
            alone = attncheck.softmax_norms(batch[i, j].astype(np.float64), mask=mask)
            for name in ("softmax_fro", "grad_fro", "softmax_over_sqrt_N", "grad_over_2sqrt_N", "grad_over_half_sqrt_N"):
                assert together[name][i, j] == alone[name]
            np.testing.assert_array_equal(together["row_softmax_fro"][i, j], alone["row_softmax_fro"])
    logits = rng.standard_normal((6, 6))
    expected = attncheck.softmax_norms(logits)
    wide = np.zeros((6, 12))
    wide[:, ::2] = logits
    for layout in (np.asfortranarray(logits), wide[:, ::2], logits.T.copy().T, logits[::-1][::-1]):
        got = attncheck.softmax_norms(layout)
        assert got["softmax_fro"] == expected["softmax_fro"]
        np.testing.assert_array_equal(got["row_grad_fro"], expected["row_grad_fro"])


def test_torch_tensors_are_viewed_without_a_copy():
    torch = pytest.importorskip("torch")
    tensor = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    view = attncheck._as_array(tensor, "logits")
    assert np.shares_memory(view, tensor.detach().numpy())
    transposed = attncheck._as_array(tensor.detach().t(), "logits")
    assert np.shares_memory(transposed, tensor.detach().numpy())
    assert not transposed.flags.c_contiguous
    assert attncheck.softmax_norms(tensor)["grad_fro"] == attncheck.softmax_norms(tensor.detach().numpy())["grad_fro"]
    assert attncheck.softmax_norms(tensor.detach().t())["softmax_fro"] == \
        attncheck.softmax_norms(tensor.detach().numpy().T.copy())["softmax_fro"]
    with pytest.raises(ValueError, match="logits has dtype torch.bfloat16"):
        attncheck.softmax_norms(tensor.detach().to(torch.bfloat16))


def test_bad_input_is_a_value_error_naming_the_place():
    logits = np.zeros((2, 3, 4, 4))
    logits[1, 0, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"logits\(1, 0\): NaN logit at row 2, column 3 \(0-based\)"):
        attncheck.softmax_norms(logits)
    mask = np.ones((4, 4), dtype=bool)
    mask[1] = False
    with pytest.raises(ValueError, match=r"every logit of row 1 \(0-based\) is -inf"):
        attncheck.softmax_norms(np.zeros((4, 4)), mask=mask)
    with pytest.raises(ValueError, match=r"\+inf logit at row 0, column 0"):
        attncheck.softmax_norms(np.array([[np.inf, 0.0]]))
    with pytest.raises(ValueError, match="logits has dtype int64: give float32 or float64"):
        attncheck.softmax_norms(np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"logits must be a matrix \(N, M\) or a batch \(\.\.\., N, M\): got shape \(3,\)"):
        attncheck.softmax_norms(np.zeros(3))
    with pytest.raises(ValueError, match=r"logits of shape \(0, 3\) are empty"):
        attncheck.softmax_norms(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="mask has dtype float64: give a boolean array"):
        attncheck.softmax_norms(np.zeros((3, 3)), mask=np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"mask has shape \(2, 3\), which does not broadcast to \(3, 3\)"):
        attncheck.softmax_norms(np.zeros((3, 3)), mask=np.ones((2, 3), dtype=bool))
