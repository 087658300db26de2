"""model/qkv_projection.py: the QKV product split into heads gives the numbers of `F.linear` + permute + unbind,
forward and backward, whatever layout its gradients come back in, and joins nothing on the way back."""

import pytest
import torch
import torch.nn.functional as F

from benchmarks.step_ops import DispatchCount
from model.qkv_projection import project_qkv

B, T, H, D, E = 2, 5, 3, 4, 8
C = H * D


def inputs(dtype=torch.float32):
    torch.manual_seed(0)
    x = torch.randn(B, T, E, dtype=dtype, requires_grad=True)
    w = torch.randn(3 * C, E, dtype=dtype, requires_grad=True)
    return x, w


def reference(x, w):
    """The split as the fused path made it before: one product, its heads' views unbound."""
    return F.linear(x, w).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)


def grads_of(split, weights):
    """Gradients of x and w under sum(q a + k b + v c) for fixed a, b, c."""
    x, w = inputs()
    outputs = split(x, w)
    sum(o.mul(a).sum() for o, a in zip(outputs, weights, strict=True)).backward()
    return outputs, x.grad, w.grad


def test_the_forward_is_the_product_bit_for_bit_and_the_gradients_agree():
    weights = [torch.randn(B, H, T, D) for _ in range(3)]
    new, gx, gw = grads_of(lambda x, w: project_qkv(x, w, H), weights)
    old, rx, rw = grads_of(reference, weights)
    assert all(torch.equal(a, b) and a.stride() == b.stride() for a, b in zip(new, old, strict=True))
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gw, rw)


def test_attentions_gradients_are_read_in_place_and_the_weights_written_in_thirds():
    x, w = inputs()
    q, k, v = project_qkv(x, w, H)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.randn_like(y)
    with DispatchCount() as backward:
        y.backward(g)
    assert backward.ops["mm"] + backward.ops["addmm_"] == 6, backward.ops  # three thirds, each twice
    assert not {"cat", "stack", "clone", "copy_"} & set(backward.ops), backward.ops
    x2, w2 = inputs()
    q2, k2, v2 = reference(x2, w2)
    F.scaled_dot_product_attention(q2, k2, v2, is_causal=True).backward(g)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


@pytest.mark.parametrize("b,t", [(1, 5), (2, 1), (1, 1)])
def test_a_batch_or_a_context_of_one_is_read_in_place_too(b, t):
    torch.manual_seed(0)
    x, w = torch.randn(b, t, E, requires_grad=True), torch.randn(3 * C, E, requires_grad=True)
    y = F.scaled_dot_product_attention(*project_qkv(x, w, H), is_causal=True)
    g = torch.randn_like(y)
    with DispatchCount() as backward:
        y.backward(g)
    assert not {"clone", "copy_", "_unsafe_view"} & set(backward.ops), backward.ops
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    q, k, v = F.linear(x2, w2).view(b, t, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_gradients_that_are_one_buffers_thirds_take_two_matmuls():
    x, w = inputs()
    q, k, v = project_qkv(x, w, H)
    joined = torch.randn(B, T, 3, H, D)  # as a kernel that writes the three gradients side by side leaves them
    with DispatchCount() as backward:
        torch.autograd.backward([q, k, v], [joined[:, :, i].transpose(1, 2) for i in range(3)])
    assert backward.ops["mm"] == 2 and backward.ops["addmm_"] == 0, backward.ops
    rows = joined.view(B * T, 3 * C)
    torch.testing.assert_close(x.grad, (rows @ w.detach()).view(B, T, E))
    torch.testing.assert_close(w.grad, rows.t() @ x.detach().view(B * T, E))


def test_any_other_layout_and_an_unused_output_still_give_the_right_gradients():
    weights = [torch.randn(B, H, T, D), torch.randn(B, H, T, D).transpose(0, 3).contiguous().transpose(0, 3), None]

    def loss(outputs):  # v unused: its gradient never arrives
        return sum(o.mul(a).sum() for o, a in zip(outputs, weights, strict=True) if a is not None)

    x, w = inputs()
    loss(project_qkv(x, w, H)).backward()
    x2, w2 = inputs()
    loss(reference(x2, w2)).backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_only_the_gradients_asked_for_are_computed():
    x, w = inputs()
    q, k, v = project_qkv(x.detach(), w, H)
    with DispatchCount() as backward:
        (q.sum() + k.sum() + v.sum()).backward()
    assert backward.ops["addmm_"] == 0 and backward.ops["mm"] == 3, backward.ops  # the weight's thirds only
    assert w.grad is not None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_autocast_it_multiplies_in_the_autocast_dtype_and_rounds_no_worse(dtype):
    """Its input's gradient sums three products where the old split made one: measured against float64, its error
    stays the size of the old path's (attention's own rounding dominates both)."""
    b, t, h, d, e = 2, 32, 2, 16, 32
    torch.manual_seed(0)
    x0, w0, g = torch.randn(b, t, e), torch.randn(3 * h * d, e) / e**0.5, torch.randn(b, h, t, d)

    def run(split, precision):
        x = x0.to(precision, copy=True).requires_grad_()
        w = w0.to(precision, copy=True).requires_grad_()
        with torch.autocast("cpu", dtype=dtype, enabled=precision == torch.float32):
            q, k, v = split(x, w)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.backward(g.to(y.dtype))
        return q, x.grad, w.grad

    def old(x, w):
        return F.linear(x, w).view(b, t, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)

    q, *new = run(lambda x, w: project_qkv(x, w, h), torch.float32)
    q_old, *before = run(old, torch.float32)
    _, *exact = run(old, torch.float64)
    assert q.dtype == dtype and torch.equal(q, q_old)
    for grad, grad_before, truth in zip(new, before, exact, strict=True):
        assert grad.dtype == torch.float32  # the parameters' own dtype, as autocast's casts give back
        assert (grad - truth).abs().max() <= 1.25 * (grad_before - truth).abs().max()
