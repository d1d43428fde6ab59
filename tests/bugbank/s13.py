"""Bug bank of 13_long_context_attention."""
from . import fits_visible, right, wrong

# MultiHeadLatentAttention's solution calls apply_rope, which the section's export cell imports from
# utils.reference (section 09); the variants import it themselves.

# --- sliding_window_mask ---------------------------------------------------------------------

_MASK = '''
def sliding_window_mask(T, window, n_sink=0):
    t = torch.arange(T)[:, None]
    s = torch.arange(T)[None, :]
    {body}
'''


def mask(body: str) -> str:
    return _MASK.format(body=body)


# --- RollingKVCache --------------------------------------------------------------------------

_ROLLING = '''
class RollingKVCache:
    def __init__(self, window, n_sink=0):
        self.window, self.n_sink = window, n_sink
        self.k = self.v = None
        self.pos = torch.empty(0, dtype=torch.long)
        self.seen = 0

    def __len__(self):
        return {length}

    def update(self, k, v):
        L, n = self.seen, k.size(2)
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        pos = torch.cat([self.pos, torch.arange(L, L + n)])
        {select}
        self.seen = L + n
        {keep}
        return {returned}
'''
_SELECT = """see = (pos < self.n_sink) | (pos > L - self.window)
        k, v, pos = k[:, :, see], v[:, :, see], pos[see]"""
_KEEP = """keep = (pos < self.n_sink) | (pos > self.seen - self.window)
        self.k, self.v, self.pos = k[:, :, keep], v[:, :, keep], pos[keep]"""


def rolling(select=_SELECT, keep=_KEEP, returned="k, v, pos", length="self.seen") -> str:
    return _ROLLING.format(select=select, keep=keep, returned=returned, length=length)


# --- MultiHeadLatentAttention ------------------------------------------------------------------

_MLA = '''
from utils.reference import apply_rope


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, n_embed, n_head, head_dim, d_latent, d_rope):
        super().__init__()
        self.n_head, self.head_dim, self.d_rope = n_head, head_dim, d_rope
        self.q_proj = nn.Linear(n_embed, n_head * (head_dim + d_rope), bias=False)
        self.kv_down = nn.Linear(n_embed, d_latent, bias=False)
        self.k_up = nn.Linear(d_latent, n_head * head_dim, bias=False)
        self.v_up = nn.Linear(d_latent, n_head * head_dim, bias=False)
        self.k_rope = nn.Linear(n_embed, d_rope, bias={rope_bias})
        self.o_proj = nn.Linear(n_head * head_dim, n_embed, bias=False)

    def forward(self, x, angles, cache=None):
        B, T, _ = x.shape
        H, Dh, R = self.n_head, self.head_dim, self.d_rope
        {split}
        q = torch.cat([q_c, {q_rope}], dim=-1)
        c = self.kv_down(x)
        {key}
        if cache is not None:
            {update}
        S = c.size(1)
        {expand}
        k = torch.cat([k, k_r[:, None].expand(B, H, S, R)], dim=-1)
        {attend}
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * Dh))
'''
_SPLIT = """q = self.q_proj(x).view(B, T, H, Dh + R).transpose(1, 2)
        q_c, q_r = q.split([Dh, R], dim=-1)"""
_KEY = "k_r = apply_rope(self.k_rope(x), angles)"
_UPDATE = "c, k_r = cache.update(c, k_r)"
_EXPAND = """k = self.k_up(c).view(B, S, H, Dh).transpose(1, 2)
        v = self.v_up(c).view(B, S, H, Dh).transpose(1, 2)"""
_ATTEND = """att = q @ k.transpose(-2, -1) / math.sqrt(Dh + R)
        allowed = torch.ones(S, S, dtype=torch.bool).tril()[S - T:]
        y = att.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v"""


def mla(split=_SPLIT, q_rope="apply_rope(q_r, angles)", key=_KEY, update=_UPDATE, expand=_EXPAND, attend=_ATTEND,
        rope_bias="False") -> str:
    return _MLA.format(split=split, q_rope=q_rope, key=key, update=update, expand=expand, attend=attend,
                       rope_bias=rope_bias)


# --- latent_queries, mla_cache_bytes, quiz_long_context -----------------------------------------

_ABSORB = '''
def latent_queries(q_content, k_up_weight):
    H, Dh = q_content.size(1), q_content.size(-1)
    {body}
'''


def absorb(body: str) -> str:
    return _ABSORB.format(body=body)


_BYTES = '''
def mla_cache_bytes(n_layer, d_latent, d_rope, seq_len, batch=1, bytes_per_elem=2):
    {body}
'''


def mlab(body: str) -> str:
    return _BYTES.format(body=body)


_QUIZ = '''
def quiz_long_context():
    return {{"mla_elems": {a}, "mha_elems": {b}, "gqa_groups": {c}, "receptive_field": {d}, "rolling_kept": {e}}}
'''


def quiz(a="512 + 64", b="2 * 128 * 128", c="576 / 256", d="32 * 4095", e="4 + 1019") -> str:
    return _QUIZ.format(a=a, b=b, c=c, d=d, e=e)


# a cache without __dict__: the check's look at what it holds must not fail a right one
_SLOTS = "class RollingKVCache:\n    __slots__ = ('window', 'n_sink', 'k', 'v', 'pos', 'seen')\n\n"

VARIANTS = [
    # --- sliding_window_mask ---
    right("sliding_window_mask", "comparisons", mask("return (s <= t) & ((s > t - window) | (s < n_sink))")),
    right("sliding_window_mask", "tril-triu", mask("""causal = torch.ones(T, T, dtype=torch.bool).tril()
    band = torch.ones(T, T, dtype=torch.bool).triu(-(window - 1))
    band[:, :n_sink] = True
    return causal & band""")),
    right("sliding_window_mask", "distance", mask("""d = t - s
    return (d >= 0) & ((d < window) | (s < n_sink))""")),
    wrong("sliding_window_mask", "window-plus-one", "window-off-by-one",
          mask("return (s <= t) & ((s >= t - window) | (s < n_sink))")),
    wrong("sliding_window_mask", "window-minus-one", "window-off-by-one",
          mask("return (s <= t) & ((t - s < window - 1) | (s < n_sink))")),
    wrong("sliding_window_mask", "two-sided", "window-not-causal",
          mask("return ((t - s).abs() < window) | ((s <= t) & (s < n_sink))")),
    wrong("sliding_window_mask", "sinks-see-future", "sink-not-causal",
          mask("return ((s <= t) & (s > t - window)) | (s < n_sink)")),
    wrong("sliding_window_mask", "no-sinks", "sink-ignored", mask("return (s <= t) & (s > t - window)")),
    wrong("sliding_window_mask", "true-masks", "mask-reversed",
          mask("return ~((s <= t) & ((s > t - window) | (s < n_sink)))")),
    wrong("sliding_window_mask", "float", "wrong-type",
          mask("return ((s <= t) & ((s > t - window) | (s < n_sink))).float()")),

    # --- RollingKVCache ---
    right("RollingKVCache", "masks", rolling()),
    right("RollingKVCache", "slices", rolling(
        select="""first = int((pos <= L - self.window).sum()) - min(self.n_sink, L)
        idx = torch.cat([torch.arange(min(self.n_sink, pos.numel())),
                         torch.arange(min(self.n_sink, pos.numel()) + max(first, 0), pos.numel())])
        k, v, pos = k.index_select(2, idx), v.index_select(2, idx), pos[idx]""")),
    right("RollingKVCache", "lists", '''
class RollingKVCache:
    def __init__(self, window, n_sink=0):
        self.window, self.n_sink, self.n = window, n_sink, 0
        self.items = []

    def __len__(self):
        return self.n

    def update(self, k, v):
        L = self.n
        for i in range(k.size(2)):
            self.items.append((L + i, k[:, :, i:i + 1], v[:, :, i:i + 1]))
        self.n += k.size(2)
        seen = [it for it in self.items if it[0] < self.n_sink or it[0] > L - self.window]
        self.items = [it for it in seen if it[0] < self.n_sink or it[0] > self.n - self.window]
        return (torch.cat([it[1] for it in seen], dim=2), torch.cat([it[2] for it in seen], dim=2),
                torch.tensor([it[0] for it in seen], dtype=torch.long))
'''.strip("\n")),
    right("RollingKVCache", "slots", rolling().replace("class RollingKVCache:\n", _SLOTS)),
    wrong("RollingKVCache", "trim-before-return", "rolling-evicts-early",
          rolling(select="see = (pos < self.n_sink) | (pos > L + n - self.window)\n"
                         "        k, v, pos = k[:, :, see], v[:, :, see], pos[see]")),
    # the same trimming in one sequence only (n_sink = 2): one case shows rolling-evicts-early's numbers, the others
    # are right where it would change them, so nothing is named; the first wrong update's shape is reported
    wrong("RollingKVCache", "trim-before-return-in-one-sequence", "wrong-shape",
          rolling(select="see = (pos < self.n_sink) | (pos > L + (n if self.n_sink == 2 else 0) - self.window)\n"
                         "        k, v, pos = k[:, :, see], v[:, :, see], pos[see]")),
    wrong("RollingKVCache", "window-plus-one", "window-off-by-one",
          rolling(select="see = (pos < self.n_sink) | (pos >= L - self.window)\n"
                         "        k, v, pos = k[:, :, see], v[:, :, see], pos[see]",
                  keep="keep = (pos < self.n_sink) | (pos >= self.seen - self.window)\n"
                       "        self.k, self.v, self.pos = k[:, :, keep], v[:, :, keep], pos[keep]")),
    wrong("RollingKVCache", "ring-buffer", "sink-slides",
          rolling(select="see = pos > L - self.window - self.n_sink\n"
                         "        k, v, pos = k[:, :, see], v[:, :, see], pos[see]",
                  keep="keep = pos > self.seen - self.window - self.n_sink\n"
                       "        self.k, self.v, self.pos = k[:, :, keep], v[:, :, keep], pos[keep]")),
    wrong("RollingKVCache", "keeps-all-returns-all", "rolling-never-evicts",
          rolling(select="pass", keep="self.k, self.v, self.pos = k, v, pos")),
    wrong("RollingKVCache", "keeps-all-returns-window", "rolling-never-evicts",
          rolling(select="see = (pos < self.n_sink) | (pos > L - self.window)",
                  keep="self.k, self.v, self.pos = k, v, pos", returned="k[:, :, see], v[:, :, see], pos[see]")),
    wrong("RollingKVCache", "buffer-positions", "rolling-positions-relative",
          rolling(returned="k, v, torch.arange(pos.numel())")),
    wrong("RollingKVCache", "len-kept", "rolling-len-kept", rolling(length="self.pos.numel()")),
    wrong("RollingKVCache", "kv-swapped", "cache-kv-swapped", rolling(returned="k, k, pos")),

    # --- MultiHeadLatentAttention ---
    right("MultiHeadLatentAttention", "loops", mla()),
    right("MultiHeadLatentAttention", "sdpa-two-scores", mla(
        expand="""k = self.k_up(c).view(B, S, H, Dh).transpose(1, 2)
        v = self.v_up(c).view(B, S, H, Dh).transpose(1, 2)
        scores = (q_c @ k.transpose(-2, -1) + apply_rope(q_r, angles) @ k_r[:, None].transpose(-2, -1))""",
        attend="""allowed = torch.ones(S, S, dtype=torch.bool).tril()[S - T:]
        w = (scores / math.sqrt(Dh + R)).masked_fill(~allowed, float("-inf")).softmax(-1)
        y = w @ v""")),
    right("MultiHeadLatentAttention", "sdpa", mla(attend="""allowed = torch.ones(S, S, dtype=torch.bool).tril()[S - T:]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)""")),
    wrong("MultiHeadLatentAttention", "rope-on-latent", "mla-rope-on-latent", mla(
        key="""c = apply_rope(c, angles)
        k_r = apply_rope(self.k_rope(x), angles)""")),
    wrong("MultiHeadLatentAttention", "no-rope", "mla-rope-missing",
          mla(q_rope="q_r", key="k_r = self.k_rope(x)")),
    wrong("MultiHeadLatentAttention", "rope-first", "mla-q-split", mla(
        split="""q = self.q_proj(x).view(B, T, H, Dh + R).transpose(1, 2)
        q_r, q_c = q.split([R, Dh], dim=-1)""")),
    wrong("MultiHeadLatentAttention", "scale-head-dim", "mla-scale", mla(
        attend="""att = q @ k.transpose(-2, -1) / math.sqrt(Dh)
        allowed = torch.ones(S, S, dtype=torch.bool).tril()[S - T:]
        y = att.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v""")),
    # a scale copied from the first case (head_dim 4): [mla-scale]'s numbers there only, on the second nothing known
    wrong("MultiHeadLatentAttention", "scale-hard-coded", "wrong", mla(
        attend="""att = q @ k.transpose(-2, -1) / 2.0
        allowed = torch.ones(S, S, dtype=torch.bool).tril()[S - T:]
        y = att.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v""")),
    wrong("MultiHeadLatentAttention", "no-mask", "not-causal", mla(
        attend="""att = q @ k.transpose(-2, -1) / math.sqrt(Dh + R)
        y = att.softmax(dim=-1) @ v""")),
    wrong("MultiHeadLatentAttention", "top-left-mask", "cache-mask-offset", mla(
        attend="""att = q @ k.transpose(-2, -1) / math.sqrt(Dh + R)
        allowed = torch.ones(S, S, dtype=torch.bool).tril()[:T]
        y = att.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v""")),
    wrong("MultiHeadLatentAttention", "caches-keys", "mla-caches-per-head", mla(
        update="""k_full = self.k_up(c).view(B, T, H, Dh).transpose(1, 2)
            v_full = self.v_up(c).view(B, T, H, Dh).transpose(1, 2)
            k_full, v_full = cache.update(k_full, v_full)""")),
    wrong("MultiHeadLatentAttention", "unrotated-key-cached", "mla-cache-key-unrotated", mla(
        key="k_r = self.k_rope(x)",
        expand="""k_r = apply_rope(k_r, torch.cat([angles.new_zeros(S - T, angles.size(1)), angles]))
        k = self.k_up(c).view(B, S, H, Dh).transpose(1, 2)
        v = self.v_up(c).view(B, S, H, Dh).transpose(1, 2)""")),
    wrong("MultiHeadLatentAttention", "cache-ignored", "cache-unused", mla(update="pass")),
    wrong("MultiHeadLatentAttention", "rope-bias", "mla-layout", mla(rope_bias="True")),

    # --- latent_queries ---
    right("latent_queries", "view-matmul", absorb("return q_content @ k_up_weight.view(H, Dh, -1)")),
    right("latent_queries", "einsum", absorb(
        "return torch.einsum('bhtd,hdc->bhtc', q_content, k_up_weight.reshape(H, Dh, -1))")),
    right("latent_queries", "loop", absorb(
        """outs = [q_content[:, h] @ k_up_weight[h * Dh:(h + 1) * Dh] for h in range(H)]
    return torch.stack(outs, dim=1)""")),
    wrong("latent_queries", "blocks-as-columns", "absorb-transposed",
          absorb("return q_content @ k_up_weight.reshape(H, -1, Dh).transpose(-1, -2)")),
    wrong("latent_queries", "strided-heads", "absorb-heads-strided",
          absorb("return q_content @ k_up_weight.view(Dh, H, -1).transpose(0, 1)")),

    # --- mla_cache_bytes ---
    right("mla_cache_bytes", "product", mlab(
        "return n_layer * (d_latent + d_rope) * seq_len * batch * bytes_per_elem")),
    right("mla_cache_bytes", "per-token", mlab("""per_token = (d_latent + d_rope) * bytes_per_elem
    return int(per_token * n_layer * batch * seq_len)""")),
    wrong("mla_cache_bytes", "k-and-v", "mla-bytes-kv-twice",
          mlab("return 2 * n_layer * (d_latent + d_rope) * seq_len * batch * bytes_per_elem")),
    wrong("mla_cache_bytes", "latent-twice", "mla-bytes-kv-twice",
          mlab("return n_layer * (2 * d_latent + d_rope) * seq_len * batch * bytes_per_elem")),
    wrong("mla_cache_bytes", "no-rope", "mla-bytes-no-rope",
          mlab("return n_layer * d_latent * seq_len * batch * bytes_per_elem")),
    wrong("mla_cache_bytes", "no-batch", "kv-bytes-no-batch",
          mlab("return n_layer * (d_latent + d_rope) * seq_len * bytes_per_elem")),
    wrong("mla_cache_bytes", "float", "wrong-type",
          mlab("return n_layer * (d_latent + d_rope) * seq_len * batch * bytes_per_elem / 1")),

    # --- quiz_long_context ---
    right("quiz_long_context", "numbers", quiz()),
    right("quiz_long_context", "tensors", quiz(a="torch.tensor(576)", c="2.25", d="131040.0")),
    wrong("quiz_long_context", "kv-twice", "quiz-mla-kv-twice", quiz(a="2 * 512 + 64")),
    wrong("quiz_long_context", "rope-per-head", "quiz-mla-rope-per-head", quiz(a="512 + 128 * 64")),
    wrong("quiz_long_context", "mha-half", "quiz-mha-no-factor-2", quiz(b="128 * 128")),
    wrong("quiz_long_context", "groups-half", "quiz-gqa-groups-no-factor-2", quiz(c="576 / 128")),
    wrong("quiz_long_context", "receptive-window", "quiz-receptive-off-by-one", quiz(d="32 * 4096")),
    wrong("quiz_long_context", "receptive-one-layer", "quiz-receptive-one-layer", quiz(d="4095")),
    fits_visible("quiz_long_context", "rolling-whole-window", "quiz-rolling-off-by-one", quiz(e="4 + 1020")),
]
