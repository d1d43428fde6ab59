"""Bug bank of 05_multi_head_attention."""
from . import fits_visible, right, wrong

# CausalSelfAttention's solution calls the learner's split_heads and merge_heads.
DEPENDS = {"CausalSelfAttention": ("split_heads", "merge_heads")}

_MHA = '''
from utils.reference import Head

class MultiHeadAttention(nn.Module):
    def __init__(self, n_embed, n_head, context_length):
        super().__init__()
        self.heads = nn.ModuleList([Head({head_size}, n_embed, context_length) for _ in range(n_head)])
        {proj}

    def forward(self, x):
        {body}
'''


def mha(body="return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))",
        head_size="n_embed // n_head", proj="self.proj = nn.Linear(n_embed, n_embed)") -> str:
    return _MHA.format(body=body, head_size=head_size, proj=proj)


_CSA = '''
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embed, n_head, context_length):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embed, 3 * n_embed, bias=False)
        self.proj = nn.Linear(n_embed, n_embed)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).tril())

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        {split}
        {attend}
        {out}
'''
_SPLIT = """q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))"""
_ATTEND = """att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = att @ v"""
_OUT = "return self.proj(y.transpose(1, 2).reshape(B, T, C))"


def csa(split=_SPLIT, attend=_ATTEND, out=_OUT) -> str:
    return _CSA.format(split=split, attend=attend, out=out)


_COPY = '''
def copy_heads_into(looped, fused):
    with torch.no_grad():
        {body}
    return fused
'''


def copy(body: str) -> str:
    return _COPY.format(body=body)


_COPY_RIGHT = """wq = torch.cat([h.query.weight for h in looped.heads])
        wk = torch.cat([h.key.weight for h in looped.heads])
        wv = torch.cat([h.value.weight for h in looped.heads])
        fused.qkv.weight.copy_(torch.cat([wq, wk, wv]))
        fused.proj.load_state_dict(looped.proj.state_dict())"""

VARIANTS = [
    # --- MultiHeadAttention ---
    right("MultiHeadAttention", "seed", mha()),
    right("MultiHeadAttention", "stack-flatten", mha(
        body="return self.proj(torch.stack([h(x) for h in self.heads], dim=-2).flatten(-2))")),
    wrong("MultiHeadAttention", "no-proj", "proj-missing", mha(
        body="return torch.cat([h(x) for h in self.heads], dim=-1)")),
    wrong("MultiHeadAttention", "reversed-concat", "heads-concat-order", mha(
        body="return self.proj(torch.cat([h(x) for h in reversed(self.heads)], dim=-1))")),
    wrong("MultiHeadAttention", "full-width-heads", "head-size", mha(head_size="n_embed")),
    wrong("MultiHeadAttention", "float-head-size", "head-size-float", mha(head_size="n_embed / n_head")),
    wrong("MultiHeadAttention", "python-list", "heads-plain-list", mha().replace(
        "nn.ModuleList([Head({0}, n_embed, context_length) for _ in range(n_head)])".format("n_embed // n_head"),
        "[Head(n_embed // n_head, n_embed, context_length) for _ in range(n_head)]")),
    wrong("MultiHeadAttention", "cat-on-time", "concat-wrong-dim", mha(
        body="return self.proj(torch.cat([h(x) for h in self.heads], dim=1))")),
    wrong("MultiHeadAttention", "proj-no-bias", "linear-layout", mha(
        proj="self.proj = nn.Linear(n_embed, n_embed, bias=False)")),
    # --- split_heads ---
    right("split_heads", "view-transpose", """
        def split_heads(x, n_head):
            B, T, C = x.shape
            return x.view(B, T, n_head, C // n_head).transpose(1, 2)
    """),
    right("split_heads", "unflatten-permute", """
        def split_heads(x, n_head):
            return x.unflatten(-1, (n_head, -1)).permute(0, 2, 1, 3)
    """),
    right("split_heads", "stack-chunks", """
        def split_heads(x, n_head):
            return torch.stack(x.chunk(n_head, dim=-1), dim=1)
    """),
    wrong("split_heads", "view-only", "view-without-transpose", """
        def split_heads(x, n_head):
            B, T, C = x.shape
            return x.view(B, n_head, T, C // n_head)
    """),
    wrong("split_heads", "strided", "heads-strided", """
        def split_heads(x, n_head):
            B, T, C = x.shape
            return x.reshape(B, T, C // n_head, n_head).permute(0, 3, 1, 2)
    """),
    wrong("split_heads", "float-head-size", "head-size-float", """
        def split_heads(x, n_head):
            B, T, C = x.shape
            return x.view(B, T, n_head, C / n_head).transpose(1, 2)
    """),
    wrong("split_heads", "no-transpose", "view-without-transpose", """
        def split_heads(x, n_head):
            B, T, C = x.shape
            return x.view(B, T, n_head, C // n_head)
    """),
    # --- merge_heads ---
    right("merge_heads", "transpose-reshape", """
        def merge_heads(x):
            B, H, T, Dh = x.shape
            return x.transpose(1, 2).reshape(B, T, H * Dh)
    """),
    right("merge_heads", "contiguous-view", """
        def merge_heads(x):
            B, H, T, Dh = x.shape
            return x.transpose(1, 2).contiguous().view(B, T, H * Dh)
    """),
    right("merge_heads", "cat-unbind", """
        def merge_heads(x):
            return torch.cat(x.unbind(1), dim=-1)
    """),
    wrong("merge_heads", "no-transpose", "merge-without-transpose", """
        def merge_heads(x):
            B, H, T, Dh = x.shape
            return x.reshape(B, T, H * Dh)
    """),
    wrong("merge_heads", "view-not-contiguous", "view-needs-contiguous", """
        def merge_heads(x):
            B, H, T, Dh = x.shape
            return x.transpose(1, 2).view(B, T, H * Dh)
    """),
    wrong("merge_heads", "strided", "heads-strided", """
        def merge_heads(x):
            B, H, T, Dh = x.shape
            return x.permute(0, 2, 3, 1).reshape(B, T, H * Dh)
    """),
    # --- CausalSelfAttention ---
    right("CausalSelfAttention", "manual", csa()),
    right("CausalSelfAttention", "sdpa", csa(attend="y = F.scaled_dot_product_attention(q, k, v, is_causal=True)")),
    right("CausalSelfAttention", "einsum-unflatten", csa(
        split="""q, k, v = self.qkv(x).unflatten(-1, (3, H, C // H)).permute(2, 0, 3, 1, 4)""",
        attend="""att = torch.einsum("bhtd,bhsd->bhts", q, k) * (C // H) ** -0.5
        att = att.masked_fill(~self.mask[:T, :T], -1e9).softmax(-1)
        y = torch.einsum("bhts,bhsd->bhtd", att, v)""")),
    wrong("CausalSelfAttention", "scale-by-C", "scale-by-sqrt-C", csa(
        attend="""att = (q @ k.transpose(-2, -1)) / math.sqrt(C)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = att @ v""")),
    # √Dh written as a number: right where Dh = 4, caught on the visible case with Dh = 8
    wrong("CausalSelfAttention", "scale-written-as-2", "wrong", csa(
        attend="""att = (q @ k.transpose(-2, -1)) / 2
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = att @ v""")),
    wrong("CausalSelfAttention", "interleaved", "qkv-interleaved", csa(
        split="""q, k, v = self.qkv(x).view(B, T, H, 3, C // H).permute(3, 0, 2, 1, 4)""")),
    wrong("CausalSelfAttention", "split-view-only", "view-without-transpose", csa(
        split="""q, k, v = (t.reshape(B, H, T, C // H) for t in self.qkv(x).split(C, dim=-1))""")),
    wrong("CausalSelfAttention", "no-mask", "not-causal", csa(attend="y = F.scaled_dot_product_attention(q, k, v)")),
    wrong("CausalSelfAttention", "triu-mask", "mask-transposed", csa(
        attend="""att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(~self.mask[:T, :T].T, float("-inf")).softmax(dim=-1)
        y = att @ v""")),
    wrong("CausalSelfAttention", "mask-not-sliced", "tril-not-sliced", csa(
        attend="""att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1)
        y = att @ v""")),
    wrong("CausalSelfAttention", "no-proj", "proj-missing", csa(out="return y.transpose(1, 2).reshape(B, T, C)")),
    wrong("CausalSelfAttention", "merge-without-transpose", "merge-without-transpose", csa(
        out="return self.proj(y.reshape(B, T, C))")),
    wrong("CausalSelfAttention", "loop-over-heads", "loop-over-heads", csa(attend="""ys = []
        for h in range(H):
            a = (q[:, h] @ k[:, h].transpose(-2, -1)) / math.sqrt(k.size(-1))
            a = a.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
            ys.append(a @ v[:, h])
        y = torch.stack(ys, dim=1)""")),
    # --- copy_heads_into ---
    right("copy_heads_into", "cat-copy", copy(_COPY_RIGHT)),
    right("copy_heads_into", "row-slices", copy("""C = fused.proj.in_features
        for i, name in enumerate(["query", "key", "value"]):
            row = i * C
            for h in looped.heads:
                w = getattr(h, name).weight
                fused.qkv.weight[row:row + w.shape[0]] = w
                row += w.shape[0]
        fused.proj.weight[:] = looped.proj.weight
        fused.proj.bias[:] = looped.proj.bias""")),
    wrong("copy_heads_into", "kqv-order", "copy-qkv-order", copy(_COPY_RIGHT.replace(
        "torch.cat([wq, wk, wv])", "torch.cat([wk, wq, wv])"))),
    wrong("copy_heads_into", "no-proj", "copy-proj-missing", copy(_COPY_RIGHT.replace(
        "\n        fused.proj.load_state_dict(looped.proj.state_dict())", ""))),
    wrong("copy_heads_into", "proj-weight-only", "copy-proj-missing", copy(_COPY_RIGHT.replace(
        "fused.proj.load_state_dict(looped.proj.state_dict())", "fused.proj.weight.copy_(looped.proj.weight)"))),
    wrong("copy_heads_into", "per-head-interleaved", "qkv-interleaved", copy("""fused.qkv.weight.copy_(torch.cat(
            [torch.cat([h.query.weight, h.key.weight, h.value.weight]) for h in looped.heads]))
        fused.proj.load_state_dict(looped.proj.state_dict())""")),
    wrong("copy_heads_into", "heads-reversed", "heads-concat-order", copy(_COPY_RIGHT.replace(
        "for h in looped.heads", "for h in reversed(looped.heads)"))),
    wrong("copy_heads_into", "returns-none", "wrong-type", """
        def copy_heads_into(looped, fused):
            fused.load_state_dict(looped.state_dict(), strict=False)
    """),
]

VARIANTS += [
    # --- quiz_head_width (第六章 self-test 3: n_embed = 64, n_head = 8; the hidden test adds qkv_params) ---
    right("quiz_head_width", "numbers", """
        def quiz_head_width():
            return {"head_width": 8, "concat_width": 64, "qkv_params": 12288}
    """),
    right("quiz_head_width", "computed", """
        def quiz_head_width():
            n_embed, n_head = 64, 8
            head = n_embed // n_head
            return {"head_width": head, "concat_width": n_head * head, "qkv_params": n_head * 3 * n_embed * head}
    """),
    wrong("quiz_head_width", "width-is-C", "quiz-head-width-from-C", """
        def quiz_head_width():
            return {"head_width": 64, "concat_width": 64, "qkv_params": 12288}
    """),
    wrong("quiz_head_width", "width-C-times-H", "quiz-head-width-times-H", """
        def quiz_head_width():
            return {"head_width": 512, "concat_width": 64, "qkv_params": 12288}
    """),
    wrong("quiz_head_width", "concat-is-head", "quiz-concat-width-is-head", """
        def quiz_head_width():
            return {"head_width": 8, "concat_width": 8, "qkv_params": 12288}
    """),
    wrong("quiz_head_width", "concat-C-times-H", "quiz-concat-width-times-H", """
        def quiz_head_width():
            return {"head_width": 8, "concat_width": 512, "qkv_params": 12288}
    """),
    fits_visible("quiz_head_width", "params-heads-full-width", "quiz-head-width-from-C", """
        def quiz_head_width():
            return {"head_width": 8, "concat_width": 64, "qkv_params": 3 * 64 * 64 * 8}
    """),
    fits_visible("quiz_head_width", "params-one-head", "wrong", """
        def quiz_head_width():
            return {"head_width": 8, "concat_width": 64, "qkv_params": 3 * 64 * 8}
    """),
    wrong("quiz_head_width", "float-string", "wrong-type", """
        def quiz_head_width():
            return {"head_width": "8", "concat_width": 64, "qkv_params": 12288}
    """),
    wrong("quiz_head_width", "missing", "quiz-missing-key", """
        def quiz_head_width():
            return {"head_width": 8, "concat_width": 64}
    """),
    # --- quiz_attention_memory (第六章 self-test 4: B and T doubled; the hidden test adds H doubled, T halved) ---
    right("quiz_attention_memory", "number", """
        def quiz_attention_memory():
            return {"ratio": 8, "ratio_heads": 0.5}
    """),
    right("quiz_attention_memory", "computed-float", """
        def quiz_attention_memory():
            size = lambda B, H, T: B * H * T * T
            return {"ratio": size(2.0, 1, 2.0) / size(1, 1, 1), "ratio_heads": size(1, 2, 0.5) / size(1, 1, 1)}
    """),
    wrong("quiz_attention_memory", "four", "quiz-memory-quadratic-missed", """
        def quiz_attention_memory():
            return {"ratio": 4, "ratio_heads": 0.5}
    """),
    wrong("quiz_attention_memory", "two", "quiz-memory-linear", """
        def quiz_attention_memory():
            return {"ratio": 2, "ratio_heads": 0.5}
    """),
    wrong("quiz_attention_memory", "sixteen", "quiz-memory-batch-squared", """
        def quiz_attention_memory():
            return {"ratio": 16, "ratio_heads": 0.5}
    """),
    fits_visible("quiz_attention_memory", "heads-T-linear", "quiz-memory-quadratic-missed", """
        def quiz_attention_memory():
            return {"ratio": 8, "ratio_heads": 1}
    """),
    fits_visible("quiz_attention_memory", "heads-missed", "quiz-memory-quadratic-missed", """
        def quiz_attention_memory():
            return {"ratio": 8, "ratio_heads": 0.25}
    """),
    wrong("quiz_attention_memory", "bare-number", "wrong-type", """
        def quiz_attention_memory():
            return 8
    """),
    wrong("quiz_attention_memory", "missing", "quiz-missing-key", """
        def quiz_attention_memory():
            return {"ratio": 8}
    """),
]
