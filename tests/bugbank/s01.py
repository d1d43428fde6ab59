"""Bug bank of 01_qkv_and_scores."""
from . import right, wrong

VARIANTS = [
    # --- project_qkv ---
    right("project_qkv", "matmul", """
        def project_qkv(x, w_q, w_k, w_v):
            return x @ w_q, x @ w_k, x @ w_v
    """),
    right("project_qkv", "einsum", """
        def project_qkv(x, w_q, w_k, w_v):
            return tuple(torch.einsum("...tc,cd->...td", x, w) for w in (w_q, w_k, w_v))
    """),
    right("project_qkv", "fused-then-split", """
        def project_qkv(x, w_q, w_k, w_v):
            d = w_q.shape[1]
            qkv = torch.matmul(x, torch.cat([w_q, w_k, w_v], dim=1))
            return qkv.split(d, dim=-1)
    """),
    right("project_qkv", "F-linear", """
        def project_qkv(x, w_q, w_k, w_v):
            return [F.linear(x, w.T) for w in (w_q, w_k, w_v)]
    """),
    wrong("project_qkv", "linear-layout", "weights-transposed", """
        def project_qkv(x, w_q, w_k, w_v):
            return F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    """),
    wrong("project_qkv", "transposed", "weights-transposed", """
        def project_qkv(x, w_q, w_k, w_v):
            return x @ w_q.T, x @ w_k.T, x @ w_v.T
    """),
    wrong("project_qkv", "transposed-W-rectangular", "weights-transposed", """
        def project_qkv(x, w_q, w_k, w_v):
            return x @ w_q.t(), x @ w_k.t(), x @ w_v.t()
    """),
    wrong("project_qkv", "k-v-swapped", "qkv-mixed-up", """
        def project_qkv(x, w_q, w_k, w_v):
            return x @ w_q, x @ w_v, x @ w_k
    """),
    wrong("project_qkv", "one-weight", "qkv-mixed-up", """
        def project_qkv(x, w_q, w_k, w_v):
            q = x @ w_q
            return q, q, q
    """),
    wrong("project_qkv", "in-place", "modified-input", """
        def project_qkv(x, w_q, w_k, w_v):
            x -= x.mean(-1, keepdim=True)
            return x @ w_q, x @ w_k, x @ w_v
    """),
    wrong("project_qkv", "returns-dict", "wrong-type", """
        def project_qkv(x, w_q, w_k, w_v):
            return {"q": x @ w_q, "k": x @ w_k, "v": x @ w_v}
    """),
    wrong("project_qkv", "stub", "not-implemented", """
        def project_qkv(x, w_q, w_k, w_v):
            raise NotImplementedError()
    """),
    # --- attention_scores ---
    right("attention_scores", "transpose", """
        def attention_scores(q, k):
            return q @ k.transpose(-2, -1)
    """),
    right("attention_scores", "einsum", """
        def attention_scores(q, k):
            return torch.einsum("...td,...sd->...ts", q, k)
    """),
    right("attention_scores", "mT-matmul", """
        def attention_scores(q, k):
            return torch.matmul(q, k.mT)
    """),
    right("attention_scores", "broadcast-sum", """
        def attention_scores(q, k):
            return (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1)
    """),
    wrong("attention_scores", "k-q", "qk-swapped", """
        def attention_scores(q, k):
            return k @ q.transpose(-2, -1)
    """),
    wrong("attention_scores", "dot-T", "transpose-all-dims", """
        def attention_scores(q, k):
            return q @ k.T
    """),
    wrong("attention_scores", "transpose-1-2", "transpose-fixed-dims", """
        def attention_scores(q, k):
            return q @ k.transpose(1, 2)
    """),
    wrong("attention_scores", "prescaled", "unexpected-scale", """
        def attention_scores(q, k):
            return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    """),
    wrong("attention_scores", "scaled-by-first-D", "wrong", """
        def attention_scores(q, k):
            return q @ k.transpose(-2, -1) / math.sqrt(8)
    """),
    wrong("attention_scores", "elementwise", "crashed", """
        def attention_scores(q, k):
            return (q * k).sum(-1)
    """),
    wrong("attention_scores", "squeeze", "wrong-shape", """
        def attention_scores(q, k):
            return (q @ k.transpose(-2, -1)).squeeze()
    """),
    wrong("attention_scores", "stub", "not-implemented", """
        def attention_scores(q, k):
            raise NotImplementedError()
    """),
]
