"""Bug bank of 07_gqa_and_kv_cache."""
from . import fits_visible, right, wrong

# GroupedQueryAttention's solution calls the learner's repeat_kv (its check passes its own cache,
# so the learner's KVCache does not matter to it). The variants below repeat K/V inline, so that
# each is graded on its own.
DEPENDS = {"GroupedQueryAttention": ("repeat_kv",)}

# --- repeat_kv ---------------------------------------------------------------------------------

_REPEAT = '''
def repeat_kv(x, n_rep):
    {body}
'''


def rep(body: str) -> str:
    return _REPEAT.format(body=body)


# --- KVCache -----------------------------------------------------------------------------------

_CACHE = '''
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def update(self, k, v):
        {update}

    def __len__(self):
        return 0 if self.k is None else self.k.shape[2]
'''
_UPDATE = """if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v"""


def cache(update: str = _UPDATE) -> str:
    return _CACHE.format(update=update)


# --- GroupedQueryAttention ---------------------------------------------------------------------

_GQA = '''
class GroupedQueryAttention(nn.Module):
    def __init__(self, n_embed, n_head, n_kv_head, context_length):
        super().__init__()
        self.n_head, self.n_kv_head = n_head, n_kv_head
        self.head_dim = n_embed // n_head
        self.q_proj = nn.Linear(n_embed, n_embed, bias=False)
        self.k_proj = nn.Linear(n_embed, {kv_width}, bias=False)
        self.v_proj = nn.Linear(n_embed, {kv_width}, bias=False)
        self.o_proj = nn.Linear(n_embed, n_embed, bias=False)
        self.register_buffer("tril", torch.ones(context_length, context_length, dtype=torch.bool).tril())

    def forward(self, x, cache=None):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        {cache}
        S = k.size(2)
        n_rep = self.n_head // self.n_kv_head
        {repeat}
        {attend}
        y = y.transpose(1, 2).reshape(B, T, C)
        {out}
'''
_CACHE_USE = """if cache is not None:
            k, v = cache.update(k, v)"""
_REPEAT_USE = "k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)"
_ATTEND = """att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.tril[S - T:S, :S], float("-inf"))
        y = att.softmax(dim=-1) @ v"""


def gqa(cache=_CACHE_USE, repeat=_REPEAT_USE, attend=_ATTEND, out="return self.o_proj(y)",
        kv_width="n_kv_head * self.head_dim") -> str:
    return _GQA.format(cache=cache, repeat=repeat, attend=attend, out=out, kv_width=kv_width)


def split_by_view(source: str) -> str:
    """``source`` with its heads read straight as (B, n, T, Dh), without the transpose."""
    for n in ("n_head", "n_kv_head"):
        source = source.replace(f"view(B, T, self.{n}, self.head_dim).transpose(1, 2)",
                                f"view(B, self.{n}, T, self.head_dim)")
    return source


# --- kv_cache_bytes ----------------------------------------------------------------------------

_BYTES = '''
def kv_cache_bytes(n_layer, n_kv_head, head_dim, seq_len, batch_size=1, bytes_per_elem=2):
    {body}
'''


def kvb(body: str) -> str:
    return _BYTES.format(body=body)


_QUIZ = '''
def quiz_kv_cache():
    return {{"gemma_7b_gib": {a}, "batch16_gib": {b}, "qwen2_shrink": {c}, "mistral_32k_gib": {d}}}
'''


def quiz(a="2 * 28 * 16 * 256 * 8192 * 2 / 2**30", b="16 * 3.5", c="12 / 2",
         d="2 * 32 * 8 * 128 * min(32768, 4096) * 8 * 2 / 2**30") -> str:
    return _QUIZ.format(a=a, b=b, c=c, d=d)


VARIANTS = [
    # --- repeat_kv ---
    right("repeat_kv", "expand-reshape", rep("""B, Hkv, T, Dh = x.shape
    return x[:, :, None, :, :].expand(B, Hkv, n_rep, T, Dh).reshape(B, Hkv * n_rep, T, Dh)""")),
    right("repeat_kv", "repeat-interleave", rep("return torch.repeat_interleave(x, n_rep, dim=1)")),
    right("repeat_kv", "stack-flatten", rep("return torch.stack([x] * n_rep, dim=2).flatten(1, 2)")),
    wrong("repeat_kv", "tiled", "repeat-kv-tiled", rep("return x.repeat(1, n_rep, 1, 1)")),
    wrong("repeat_kv", "cat-tiled", "repeat-kv-tiled", rep("return torch.cat([x] * n_rep, dim=1)")),
    wrong("repeat_kv", "interleave-time", "repeat-kv-wrong-dim", rep("return x.repeat_interleave(n_rep, dim=2)")),
    wrong("repeat_kv", "expand-wrong-axis", "repeat-kv-tiled", rep("""B, Hkv, T, Dh = x.shape
    return x[:, None].expand(B, n_rep, Hkv, T, Dh).reshape(B, n_rep * Hkv, T, Dh)""")),
    # --- KVCache ---
    right("KVCache", "concatenate", cache()),
    right("KVCache", "lists", """
        class KVCache:
            def __init__(self):
                self.keys, self.values = [], []

            def update(self, k, v):
                self.keys.append(k)
                self.values.append(v)
                return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)

            def __len__(self):
                return sum(k.size(2) for k in self.keys)
    """),
    right("KVCache", "preallocated", """
        class KVCache:
            def __init__(self, max_len=64):
                self.max_len, self.pos = max_len, 0
                self.k = self.v = None

            def update(self, k, v):
                B, H, T, D = k.shape
                if self.k is None:
                    self.k = k.new_zeros(B, H, self.max_len, D)
                    self.v = v.new_zeros(B, H, self.max_len, D)
                self.k[:, :, self.pos:self.pos + T] = k
                self.v[:, :, self.pos:self.pos + T] = v
                self.pos += T
                return self.k[:, :, :self.pos], self.v[:, :, :self.pos]

            def __len__(self):
                return self.pos
    """),
    # the contract's KVCache() takes no maximum length: a preallocated buffer that doubles when it is full
    right("KVCache", "growing-buffer", """
        class KVCache:
            def __init__(self):
                self.k = self.v = None
                self.n = 0

            def update(self, k, v):
                new = k.size(2)
                if self.k is None or self.n + new > self.k.size(2):
                    size = max(self.n + new, 2 * (0 if self.k is None else self.k.size(2)))
                    k_buf = k.new_empty(*k.shape[:2], size, k.size(3))
                    v_buf = v.new_empty(*v.shape[:2], size, v.size(3))
                    if self.k is not None:
                        k_buf[:, :, :self.n], v_buf[:, :, :self.n] = self.k[:, :, :self.n], self.v[:, :, :self.n]
                    self.k, self.v = k_buf, v_buf
                self.k[:, :, self.n:self.n + new] = k
                self.v[:, :, self.n:self.n + new] = v
                self.n += new
                return self.k[:, :, :self.n], self.v[:, :, :self.n]

            def __len__(self):
                return self.n
    """),
    wrong("KVCache", "overwrites", "cache-overwrites", cache("""self.k, self.v = k, v
        return self.k, self.v""")),
    wrong("KVCache", "reappends", "cache-reappends", cache("""if self.k is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        else:
            self.k, self.v = k, v
        return k, v""")),
    wrong("KVCache", "class-level-lists", "cache-not-reset", """
        class KVCache:
            keys = []
            values = []

            def update(self, k, v):
                self.keys.append(k)
                self.values.append(v)
                return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)

            def __len__(self):
                return sum(k.size(2) for k in self.keys)
    """),
    wrong("KVCache", "cat-heads-dim", "cache-wrong-dim", cache(_UPDATE.replace("dim=2", "dim=1"))),
    wrong("KVCache", "kv-swapped", "cache-kv-swapped", cache(_UPDATE.replace("return self.k, self.v",
                                                                           "return self.v, self.k"))),
    wrong("KVCache", "len-of-batch", "cache-len-wrong", cache().replace("self.k.shape[2]", "len(self.k)")),
    # --- GroupedQueryAttention ---
    right("GroupedQueryAttention", "masked-fill", gqa()),
    right("GroupedQueryAttention", "sdpa-offset-mask", gqa(
        attend="""y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.tril[S - T:S, :S])""")),
    right("GroupedQueryAttention", "sdpa-enable-gqa", gqa(
        repeat="pass", attend="""mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)""")),
    right("GroupedQueryAttention", "grouped-einsum", gqa(
        repeat="pass", attend="""qg = q.view(B, self.n_kv_head, n_rep, T, self.head_dim)
        att = torch.einsum("bgrtd,bgsd->bgrts", qg, k) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.tril[S - T:S, :S], float("-inf")).softmax(dim=-1)
        y = torch.einsum("bgrts,bgsd->bgrtd", att, v).reshape(B, self.n_head, T, self.head_dim)""")),
    wrong("GroupedQueryAttention", "tiled-groups", "kv-groups-order", gqa(
        repeat="k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)")),
    wrong("GroupedQueryAttention", "grouped-wrong-order", "kv-groups-order", gqa(
        repeat="pass", attend="""qg = q.view(B, n_rep, self.n_kv_head, T, self.head_dim)
        att = torch.einsum("brgtd,bgsd->brgts", qg, k) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.tril[S - T:S, :S], float("-inf")).softmax(dim=-1)
        y = torch.einsum("brgts,bgsd->brgtd", att, v).reshape(B, self.n_head, T, self.head_dim)""")),
    wrong("GroupedQueryAttention", "is-causal-with-cache", "cache-mask-offset", gqa(
        attend="y = F.scaled_dot_product_attention(q, k, v, is_causal=True)")),
    wrong("GroupedQueryAttention", "mask-not-offset", "cache-mask-offset", gqa(
        attend="""att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.tril[:T, :T], float("-inf"))
        y = att.softmax(dim=-1) @ v""")),
    wrong("GroupedQueryAttention", "mask-only-without-cache", "cache-mask-offset", gqa(
        attend="""att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if cache is None:
            att = att.masked_fill(~self.tril[:T, :T], float("-inf"))
        y = att.softmax(dim=-1) @ v""")),
    wrong("GroupedQueryAttention", "cache-ignored", "cache-unused", gqa(cache="""if cache is not None:
            cache.update(k, v)""", attend="""att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.tril[:T, :T], float("-inf"))
        y = att.softmax(dim=-1) @ v""")),
    wrong("GroupedQueryAttention", "module-held-cache", "cache-not-reset", gqa(cache="""if cache is not None:
            if not hasattr(self, "cache"):
                self.cache = cache
            k, v = self.cache.update(k, v)""")),
    wrong("GroupedQueryAttention", "position-counter", "cache-not-reset", gqa(cache="""if cache is not None:
            k, v = cache.update(k, v)
            self.pos = getattr(self, "pos", 0) + T""",
        attend="""P = getattr(self, "pos", T) - T if cache is not None else 0
        att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.tril[P:P + T, :S], float("-inf"))
        y = att.softmax(dim=-1) @ v""")),
    wrong("GroupedQueryAttention", "offset-after-update", "cache-mask-offset", gqa(cache="""P = 0
        if cache is not None:
            k, v = cache.update(k, v)
            P = len(cache)""", attend="""att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.tril[P:P + T, :S], float("-inf"))
        y = att.softmax(dim=-1) @ v""")),
    # right without a cache, but the cache holds H heads instead of Hkv: the check's cache records what it is given
    wrong("GroupedQueryAttention", "cache-after-repeat", "cache-receives-repeated", gqa(
        cache="""r = self.n_head // self.n_kv_head
        k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
        if cache is not None:
            k, v = cache.update(k, v)""", repeat="pass")),
    wrong("GroupedQueryAttention", "update-twice", "cache-reappends", gqa(cache="""if cache is not None:
            cache.update(k, v)
            k, v = cache.update(k, v)""")),
    # heads split by reading the projections straight as (B, H, T, Dh): no transpose (05's "错误一")
    wrong("GroupedQueryAttention", "split-without-transpose", "view-without-transpose", split_by_view(gqa())),
    wrong("GroupedQueryAttention", "split-and-merge-without-transpose", "view-without-transpose", split_by_view(
        gqa()).replace("y = y.transpose(1, 2).reshape(B, T, C)", "y = y.reshape(B, T, C)")),
    wrong("GroupedQueryAttention", "softmax-over-queries", "softmax-wrong-dim", gqa(
        attend=_ATTEND.replace("att.softmax(dim=-1)", "att.softmax(dim=-2)"))),
    wrong("GroupedQueryAttention", "no-mask", "not-causal", gqa(attend="y = F.scaled_dot_product_attention(q, k, v)")),
    wrong("GroupedQueryAttention", "no-o-proj", "o-proj-missing", gqa(out="return y")),
    wrong("GroupedQueryAttention", "kv-full-width", "gqa-kv-width", gqa(kv_width="n_embed")),
    wrong("GroupedQueryAttention", "kv-width-one-per-head", "gqa-kv-width", gqa(kv_width="n_kv_head")),
    # the projections cached before they are split into heads: [B, T, Hkv·Dh] instead of [B, Hkv, T, Dh]
    wrong("GroupedQueryAttention", "cache-before-split", "cache-receives-wrong-layout", gqa().replace(
        """k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v)""", """k, v = self.k_proj(x), self.v_proj(x)
        if cache is not None:
            k, v = cache.update(k, v)
        k = k.view(B, -1, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, -1, self.n_kv_head, self.head_dim).transpose(1, 2)""")),
    wrong("GroupedQueryAttention", "out-proj-name", "gqa-linear-layout",
          gqa(out="return self.out_proj(y)").replace("self.o_proj =", "self.out_proj =")),
    # --- kv_cache_bytes ---
    right("kv_cache_bytes", "product", kvb(
        "return 2 * n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem")),
    right("kv_cache_bytes", "per-token", kvb(
        """per_token = 2 * n_layer * n_kv_head * head_dim * bytes_per_elem  # K and V, all layers
    return per_token * seq_len * batch_size""")),
    right("kv_cache_bytes", "math-prod", kvb(
        "return math.prod([2, n_layer, n_kv_head, head_dim, seq_len, batch_size, bytes_per_elem])")),
    wrong("kv_cache_bytes", "no-factor-2", "kv-bytes-no-kv-factor", kvb(
        "return n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem")),
    wrong("kv_cache_bytes", "no-batch", "kv-bytes-no-batch", kvb(
        "return 2 * n_layer * n_kv_head * head_dim * seq_len * bytes_per_elem")),
    wrong("kv_cache_bytes", "no-dtype", "kv-bytes-no-dtype", kvb(
        "return 2 * n_layer * n_kv_head * head_dim * seq_len * batch_size")),
    wrong("kv_cache_bytes", "no-layers", "kv-bytes-no-layers", kvb(
        "return 2 * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem")),
    wrong("kv_cache_bytes", "bits", "kv-bytes-bits", kvb(
        "return 2 * n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem * 8")),
    wrong("kv_cache_bytes", "float", "wrong-type", kvb(
        "return 2.0 * n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem")),
    # --- quiz_kv_cache ---
    right("quiz_kv_cache", "computed", quiz()),
    right("quiz_kv_cache", "rounded", quiz(a="3.5", b="56", c="6", d="4")),
    wrong("quiz_kv_cache", "head-dim-from-hidden", "quiz-kv-head-dim-from-hidden",
          quiz(a="2 * 28 * 16 * (3072 // 16) * 8192 * 2 / 2**30")),
    wrong("quiz_kv_cache", "no-factor-2", "quiz-kv-no-factor-2", quiz(a="1.75")),
    wrong("quiz_kv_cache", "fp32", "quiz-kv-fp32", quiz(a="7.0")),
    wrong("quiz_kv_cache", "no-batch", "quiz-kv-no-batch", quiz(b="3.5")),
    wrong("quiz_kv_cache", "inverted", "quiz-kv-shrink-inverted", quiz(c="2 / 12")),
    wrong("quiz_kv_cache", "gemma-in-GB", "quiz-kv-unit", quiz(a="2 * 28 * 16 * 256 * 8192 * 2 / 1e9")),
    wrong("quiz_kv_cache", "batch16-in-bytes", "quiz-kv-unit", quiz(b="2 * 28 * 16 * 256 * 8192 * 16 * 2")),
    wrong("quiz_kv_cache", "gemma-other-slip", "quiz-kv-cache-size", quiz(a="3.0")),
    wrong("quiz_kv_cache", "shrink-as-difference", "quiz-kv-shrink-ratio", quiz(c="12 - 2")),
    # the sliding window of the fourth key only the hidden test grades; its other slips the visible check sees
    fits_visible("quiz_kv_cache", "window-ignored", "quiz-kv-sliding-window-ignored",
                 quiz(d="2 * 32 * 8 * 128 * 32768 * 8 * 2 / 2**30")),
    wrong("quiz_kv_cache", "window-no-batch", "quiz-kv-no-batch", quiz(d="0.5")),
    wrong("quiz_kv_cache", "window-ignored-in-GB", "quiz-kv-unit", quiz(d="2 * 32 * 8 * 128 * 32768 * 8 * 2 / 1e9")),
    wrong("quiz_kv_cache", "missing-key", "quiz-missing-key", '''
        def quiz_kv_cache():
            return {"gemma_7b_gib": 3.5, "batch16_gib": 56.0, "qwen2_shrink": 6.0}
    '''),
    # --- a known mistake's numbers on one case only: no diagnosis (compare.confirmed) ---
    # planted: each mistake on the inputs of 5 positions alone, right everywhere else
    wrong("GroupedQueryAttention", "split-without-transpose-on-one-input", "wrong", gqa().replace(
        "q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)",
        """q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if T == 5:
            q = self.q_proj(x).view(B, self.n_head, T, self.head_dim)""")),
    wrong("GroupedQueryAttention", "softmax-over-queries-on-one-input", "wrong", gqa(
        attend=_ATTEND.replace("att.softmax(dim=-1)", "att.softmax(dim=-2 if T == 5 else -1)"))),
    wrong("kv_cache_bytes", "no-batch-on-one-input", "wrong", kvb(
        "return 2 * n_layer * n_kv_head * head_dim * seq_len * (1 if seq_len == 11 else batch_size) * bytes_per_elem")),
]
