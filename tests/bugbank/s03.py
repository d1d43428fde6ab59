"""Bug bank of 03_single_head_attention."""
from . import right, wrong

_HEAD = '''
class Head(nn.Module):
    def __init__(self, head_size, n_embed, context_length):
        super().__init__()
        self.key = nn.Linear(n_embed, head_size, bias=False)
        self.query = nn.Linear(n_embed, head_size, bias=False)
        self.value = nn.Linear(n_embed, head_size, bias=False)
        {tril}

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        v = self.value(x)
        {body}
'''
_TRIL_BUFFER = "self.register_buffer('tril', torch.tril(torch.ones(context_length, context_length)))"
_SEED_BODY = """w = q @ k.transpose(-2, -1) * (1 / math.sqrt(k.shape[-1]))
        w = w.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        w = F.softmax(w, dim=-1)
        return w @ v"""


def head(body: str = _SEED_BODY, tril: str = _TRIL_BUFFER) -> str:
    return _HEAD.format(tril=tril, body=body)


_ATTENTION = '''
def attention(q, k, v, mask=None):
    {before}
    scores = {scores}
    if mask is not None:
        scores = {fill}
    weights = {weights}
    return {returns}
'''


def attn(scores="q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", fill='scores.masked_fill(~mask, float("-inf"))',
         weights="scores.softmax(dim=-1)", returns="weights @ v, weights", before="pass") -> str:
    """A learner's attention, written the usual way except for the part given."""
    return _ATTENTION.format(before=before, scores=scores, fill=fill, weights=weights, returns=returns)


VARIANTS = [
    # --- attention ---
    right("attention", "masked-fill-inf", attn()),
    right("attention", "fill-minus-1e9", """
        def attention(q, k, v, mask=None):
            scores = torch.matmul(q, k.mT) * q.shape[-1] ** -0.5
            if mask is not None:
                scores = torch.where(mask, scores, torch.tensor(-1e9))
            weights = F.softmax(scores, dim=-1)
            return torch.matmul(weights, v), weights
    """),
    right("attention", "einsum-prescaled-q", """
        def attention(q, k, v, mask=None):
            q = q / math.sqrt(q.shape[-1])
            scores = torch.einsum("...td,...sd->...ts", q, k)
            if mask is not None:
                scores = scores.masked_fill(mask.logical_not(), -float("inf"))
            weights = torch.softmax(scores, -1)
            return torch.einsum("...ts,...sd->...td", weights, v), weights
    """),
    right("attention", "sdpa-for-out", """
        def attention(q, k, v, mask=None):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            return out, scores.softmax(-1)
    """),
    # the batch dimension squeezed away: right for every batch but a single sequence
    wrong("attention", "squeezes-batch", "wrong-shape", attn(returns="(weights @ v).squeeze(0), weights.squeeze(0)")),
    wrong("attention", "mask-reversed", "mask-reversed", attn(fill='scores.masked_fill(mask, float("-inf"))')),
    wrong("attention", "mask-after-softmax", "mask-after-softmax", attn(
        fill="scores", weights="scores.softmax(dim=-1) * (mask if mask is not None else 1)")),
    wrong("attention", "mask-fill-zero", "mask-fill-zero", attn(fill="scores.masked_fill(~mask, 0.0)")),
    wrong("attention", "outputs-swapped", "outputs-swapped", attn(returns="weights, weights @ v")),
    wrong("attention", "softmax-dim-2", "softmax-wrong-dim", attn(weights="scores.softmax(dim=-2)")),
    wrong("attention", "scale-by-D", "scale-by-D", attn(scores="q @ k.transpose(-2, -1) / q.size(-1)")),
    # √d_k = 8 written as a number (the paper's d_k = 64): on the first visible case (D = 8) exactly scale-by-D's
    # numbers, on no other case; one case is no evidence for a code
    wrong("attention", "scale-written-as-8", "wrong", attn(scores="q @ k.transpose(-2, -1) / 8")),
    wrong("attention", "scale-by-v-dim", "scale-by-value-dim", attn(
        scores="q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))")),
    wrong("attention", "scale-by-sqrt-T", "scale-by-sqrt-T", attn(
        scores="q @ k.transpose(-2, -1) / math.sqrt(k.size(-2))")),
    wrong("attention", "no-scale", "scale-missing", attn(scores="q @ k.transpose(-2, -1)")),
    wrong("attention", "mask-ignored", "mask-ignored", attn(fill="scores")),
    wrong("attention", "k-q", "qk-swapped", attn(scores="k @ q.transpose(-2, -1) / math.sqrt(q.size(-1))")),
    wrong("attention", "returns-scores", "returns-scores", attn(returns="scores.softmax(dim=-1) @ v, scores")),
    wrong("attention", "transpose-1-2", "transpose-fixed-dims", attn(
        scores="q @ k.transpose(1, 2) / math.sqrt(q.size(-1))")),
    wrong("attention", "in-place-scale", "modified-input", attn(
        before="q /= math.sqrt(q.size(-1))", scores="q @ k.transpose(-2, -1)")),
    # --- Head ---
    right("Head", "seed", head()),
    right("Head", "bool-buffer-sdpa", head(
        tril="self.register_buffer('tril', torch.ones(context_length, context_length, dtype=torch.bool).tril())",
        body="return F.scaled_dot_product_attention(q, k, v, attn_mask=self.tril[:T, :T])")),
    right("Head", "not-triu-minus-1e9", head(
        tril="self.register_buffer('tril', ~torch.ones(context_length, context_length).triu(1).bool(), "
             "persistent=False)",
        body="""w = (q @ k.mT) / math.sqrt(q.size(-1))
        w = w.masked_fill(~self.tril[:T, :T], -1e9)
        return w.softmax(-1) @ v""")),
    wrong("Head", "no-mask", "not-causal", head(body="""w = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        return F.softmax(w, dim=-1) @ v""")),
    wrong("Head", "tril-parameter", "tril-not-buffer", head(
        tril="self.tril = nn.Parameter(torch.tril(torch.ones(context_length, context_length)), requires_grad=False)")),
    wrong("Head", "tril-attribute", "tril-not-buffer", head(
        tril="self.tril = torch.tril(torch.ones(context_length, context_length))")),
    wrong("Head", "tril-not-sliced", "tril-not-sliced", head(
        body="""w = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        w = w.masked_fill(self.tril == 0, float('-inf'))
        return F.softmax(w, dim=-1) @ v""")),
    wrong("Head", "mask-reversed", "mask-reversed", head(body="""w = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        w = w.masked_fill(self.tril[:T, :T] == 1, float('-inf'))
        return F.softmax(w, dim=-1) @ v""")),
    wrong("Head", "triu-buffer", "mask-transposed", head(
        tril="self.register_buffer('tril', torch.triu(torch.ones(context_length, context_length)))")),
    wrong("Head", "softmax-dim-1", "softmax-wrong-dim", head(
        body="""w = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        w = w.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        return F.softmax(w, dim=1) @ v""")),
    wrong("Head", "mask-after-softmax", "mask-after-softmax", head(
        body="""w = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=-1)
        w = w * self.tril[:T, :T]
        return w @ v""")),
    wrong("Head", "scale-by-C", "scale-by-sqrt-C", head(body="""w = q @ k.transpose(-2, -1) / math.sqrt(C)
        w = w.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        return F.softmax(w, dim=-1) @ v""")),
    wrong("Head", "no-scale", "scale-missing", head(body="""w = q @ k.transpose(-2, -1)
        w = w.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        return F.softmax(w, dim=-1) @ v""")),
    wrong("Head", "k-q", "qk-swapped", head(body="""w = k @ q.transpose(-2, -1) / math.sqrt(k.shape[-1])
        w = w.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        return F.softmax(w, dim=-1) @ v""")),
    wrong("Head", "layers-swapped", "qk-swapped", head(body="""q, k = self.key(x), self.query(x)
        w = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        w = w.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        return F.softmax(w, dim=-1) @ v""")),
    wrong("Head", "bias", "linear-layout", head().replace(
        "bias=False)\n        self.value", "bias=True)\n        self.value")),
]
