"""Bug bank of 02_scaling_and_softmax."""
from . import right, wrong

_VARIANCE = '''
def dot_product_variance(d, n_samples=100_000, generator=None):
    q = {draw}(n_samples, d{generator})
    k = {draw}(n_samples, d{generator})
    return {result}
'''


def variance(draw="torch.randn", generator=", generator=generator", result="(q * k).sum(dim=-1).var().item()") -> str:
    """A learner's dot_product_variance, written the usual way except for the part given."""
    return _VARIANCE.format(draw=draw, generator=generator, result=result)


VARIANTS = [
    # --- dot_product_variance ---
    right("dot_product_variance", "sum-then-var", variance()),
    right("dot_product_variance", "einsum-manual-var", """
        def dot_product_variance(d, n_samples=100_000, generator=None):
            q, k = torch.randn(2, n_samples, d, generator=generator, dtype=torch.float64)
            s = torch.einsum("nd,nd->n", q, k)
            return float(((s - s.mean()) ** 2).mean())
    """),
    wrong("dot_product_variance", "std", "variance-as-std", variance(result="(q * k).sum(-1).std().item()")),
    wrong("dot_product_variance", "one-term", "variance-of-one-term", variance(result="(q * k).var().item()")),
    wrong("dot_product_variance", "uniform", "variance-wrong-distribution", variance(draw="torch.rand")),
    wrong("dot_product_variance", "no-generator", "ignores-generator", variance(generator="")),
    wrong("dot_product_variance", "scaled", "variance-of-one-term", variance(
        result="((q * k).sum(-1) / math.sqrt(d)).var().item()")),
    # --- scaled_attention_scores ---
    right("scaled_attention_scores", "divide", """
        def scaled_attention_scores(q, k):
            return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    """),
    right("scaled_attention_scores", "prescaled-q", """
        def scaled_attention_scores(q, k):
            q = q * q.shape[-1] ** -0.5
            return torch.einsum("...td,...sd->...ts", q, k)
    """),
    wrong("scaled_attention_scores", "by-D", "scale-by-D", """
        def scaled_attention_scores(q, k):
            return q @ k.transpose(-2, -1) / q.size(-1)
    """),
    wrong("scaled_attention_scores", "no-scale", "scale-missing", """
        def scaled_attention_scores(q, k):
            return q @ k.transpose(-2, -1)
    """),
    wrong("scaled_attention_scores", "times-sqrt", "scale-inverted", """
        def scaled_attention_scores(q, k):
            return q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))
    """),
    wrong("scaled_attention_scores", "by-sqrt-T", "scale-by-sqrt-T", """
        def scaled_attention_scores(q, k):
            return q @ k.transpose(-2, -1) / math.sqrt(k.size(-2))
    """),
    wrong("scaled_attention_scores", "transpose-1-2", "transpose-fixed-dims", """
        def scaled_attention_scores(q, k):
            return q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
    """),
    wrong("scaled_attention_scores", "by-first-D-hardcoded", "wrong", """
        def scaled_attention_scores(q, k):
            return q @ k.transpose(-2, -1) / 8
    """),
    wrong("scaled_attention_scores", "squeeze", "wrong-shape", """
        def scaled_attention_scores(q, k):
            return (q @ k.transpose(-2, -1)).squeeze() / math.sqrt(q.size(-1))
    """),
    wrong("scaled_attention_scores", "k-q", "qk-swapped", """
        def scaled_attention_scores(q, k):
            return k @ q.transpose(-2, -1) / math.sqrt(q.size(-1))
    """),
    # --- softmax ---
    right("softmax", "max-subtraction", """
        def softmax(x, dim=-1):
            z = x - x.max(dim=dim, keepdim=True).values
            e = torch.exp(z)
            return e / e.sum(dim=dim, keepdim=True)
    """),
    right("softmax", "logsumexp", """
        def softmax(x, dim=-1):
            return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
    """),
    right("softmax", "amax-movedim", """
        def softmax(x, dim=-1):
            x = x.movedim(dim, -1)
            e = (x - x.amax(-1, keepdim=True)).exp()
            return (e / e.sum(-1, keepdim=True)).movedim(-1, dim)
    """),
    wrong("softmax", "builtin", "uses-builtin-softmax", """
        def softmax(x, dim=-1):
            return torch.softmax(x, dim=dim)
    """),
    wrong("softmax", "F-softmax", "uses-builtin-softmax", """
        def softmax(x, dim=-1):
            return F.softmax(x, dim)
    """),
    wrong("softmax", "nn-Softmax", "uses-builtin-softmax", """
        def softmax(x, dim=-1):
            return nn.Softmax(dim=dim)(x)
    """),
    wrong("softmax", "exp-log-softmax", "uses-builtin-softmax", """
        def softmax(x, dim=-1):
            return x.log_softmax(dim).exp()
    """),
    wrong("softmax", "no-max", "no-max-subtraction", """
        def softmax(x, dim=-1):
            e = torch.exp(x)
            return e / e.sum(dim=dim, keepdim=True)
    """),
    wrong("softmax", "dim-ignored", "softmax-wrong-dim", """
        def softmax(x, dim=-1):
            e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
            return e / e.sum(dim=-1, keepdim=True)
    """),
    wrong("softmax", "dim-1-hardcoded", "softmax-wrong-dim", """
        def softmax(x, dim=-1):
            e = torch.exp(x - x.amax(dim=1, keepdim=True))
            return e / e.sum(dim=1, keepdim=True)
    """),
    wrong("softmax", "global-max", "global-max-subtraction", """
        def softmax(x, dim=-1):
            e = torch.exp(x - x.max())
            return e / e.sum(dim=dim, keepdim=True)
    """),
    wrong("softmax", "whole-tensor", "softmax-whole-tensor", """
        def softmax(x, dim=-1):
            e = torch.exp(x - x.max())
            return e / e.sum()
    """),
    wrong("softmax", "row-max-global-sum", "softmax-whole-tensor", """
        def softmax(x, dim=-1):
            e = torch.exp(x - x.amax(dim=dim, keepdim=True))
            return e / e.sum()
    """),
    wrong("softmax", "max-tuple", "max-returns-namedtuple", """
        def softmax(x, dim=-1):
            e = torch.exp(x - x.max(dim=dim, keepdim=True))
            return e / e.sum(dim=dim, keepdim=True)
    """),
    wrong("softmax", "no-keepdim", "keepdim-missing", """
        def softmax(x, dim=-1):
            e = torch.exp(x - x.amax(dim=dim))
            return e / e.sum(dim=dim, keepdim=True)
    """),
    wrong("softmax", "no-sum", "not-normalized", """
        def softmax(x, dim=-1):
            return torch.exp(x - x.max(dim=dim, keepdim=True).values)
    """),
    # --- softmax_jacobian ---
    right("softmax_jacobian", "diag-minus-outer", """
        def softmax_jacobian(p):
            return torch.diag(p) - torch.outer(p, p)
    """),
    right("softmax_jacobian", "loops", """
        def softmax_jacobian(p):
            n = p.shape[0]
            J = torch.empty(n, n, dtype=p.dtype)
            for i in range(n):
                for j in range(n):
                    J[i, j] = p[i] * ((1.0 if i == j else 0.0) - p[j])
            return J
    """),
    right("softmax_jacobian", "diag-embed-broadcast", """
        def softmax_jacobian(p):
            return torch.diag_embed(p) - p[:, None] * p[None, :]
    """),
    wrong("softmax_jacobian", "sign-flipped", "jacobian-sign", """
        def softmax_jacobian(p):
            return torch.outer(p, p) - torch.diag(p)
    """),
    wrong("softmax_jacobian", "diag-only", "jacobian-diag-only", """
        def softmax_jacobian(p):
            return torch.diag(p * (1 - p))
    """),
    wrong("softmax_jacobian", "inner-product", "jacobian-inner-product", """
        def softmax_jacobian(p):
            return torch.diag(p) - p @ p
    """),
    wrong("softmax_jacobian", "outer-only", "jacobian-outer-only", """
        def softmax_jacobian(p):
            return -torch.outer(p, p)
    """),
]
