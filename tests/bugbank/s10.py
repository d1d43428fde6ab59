"""Bug bank of 10_decoder_only_model."""
import textwrap

from . import right, s07, wrong

# section 07's preallocated KV cache (a right KVCache variant there): generate must work with any cache
_PREALLOCATED = next(v.source for v in s07.VARIANTS if v.id == "KVCache-preallocated")

# --- DecoderLM ---------------------------------------------------------------------------------
# In the notebook the solution cell defines the RoPE attention and the block beside DecoderLM, and takes
# Block / RMSNorm / rope_angles … from earlier sections; the bank's loader runs one cell's source alone,
# so each variant imports them.

_LM = '''
from utils.reference import KVCache, repeat_kv  # section 07
from utils.reference import Block, RMSNorm, SwiGLU  # section 08
from utils.reference import apply_rope, rope_angles  # section 09


class _RoPEAttention(nn.Module):
    def __init__(self, n_embed, n_head, n_kv_head):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, n_embed // n_head
        self.q_proj = nn.Linear(n_embed, n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(n_embed, n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(n_embed, n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_head * self.head_dim, n_embed, bias=False)

    def forward(self, x, angles, cache=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        {rope}
        if cache is not None:
            {update}
        S = k.size(2)
        n_rep = self.n_head // self.n_kv_head
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        mask = {mask}
        y = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class _DecoderBlock(Block):
    def __init__(self, config):
        super().__init__(config.n_embed, config.n_head, config.context_length, config.ffn_hidden)
        self.attn = _RoPEAttention(config.n_embed, config.n_head, config.n_kv_head)
        {block_init}

    def forward(self, x, angles, cache=None):
        {block_forward}


class DecoderLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embed)
        self.blocks = {blocks}
        {norm}
        self.lm_head = nn.Linear(config.n_embed, config.vocab_size, bias=False)
        {tie}

    def forward(self, idx, targets=None, caches=None):
        B, T = idx.shape
        cfg = self.config
        start = 0 if caches is None else len(caches[0])
        angles = {angles}
        x = self.tok_emb(idx)
        for i, block in enumerate(self.blocks):
            x = block(x, angles, {cache})
        logits = {logits}
        loss = None
        if targets is not None:
            {loss}
        return logits, loss
'''
_BLOCKS = "nn.ModuleList([_DecoderBlock(config) for _ in range(config.n_layer)])"
_TIE = """if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight"""
_ANGLES = "rope_angles(start + T, cfg.n_embed // cfg.n_head, cfg.rope_base)[start:]"
_BLOCK_FORWARD = """x = x + self.attn(self.norm1(x), angles, cache)
        return x + self.ffn(self.norm2(x))"""
_MASK = "torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)"


def lm(blocks=_BLOCKS, norm="self.norm = RMSNorm(config.n_embed)", tie=_TIE, angles=_ANGLES,
       cache="None if caches is None else caches[i]", logits="self.lm_head(self.norm(x))",
       loss="loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))",
       rope="q, k = apply_rope(q, angles), apply_rope(k, angles)", update="k, v = cache.update(k, v)",
       mask=_MASK, block_init="pass", block_forward=_BLOCK_FORWARD, prelude="") -> str:
    return prelude + _LM.format(blocks=blocks, norm=norm, tie=tie, angles=angles, cache=cache, logits=logits,
                                loss=loss, rope=rope, update=update, mask=mask, block_init=block_init,
                                block_forward=block_forward)


# The RoPE attention as a subclass of section 07's GroupedQueryAttention (its projections and mask
# buffer), attending with F.scaled_dot_product_attention
_GQA_SUBCLASS = '''
from utils.reference import Block, GroupedQueryAttention, RMSNorm  # sections 07, 08
from utils.reference import apply_rope, rope_angles  # section 09


class _RoPEAttention(GroupedQueryAttention):
    def __init__(self, n_embed, n_head, n_kv_head, context_length=64):
        super().__init__(n_embed, n_head, n_kv_head, context_length)

    def forward(self, x, angles, cache=None):
        B, T, C = x.shape
        split = lambda t, n: t.view(B, T, n, self.head_dim).transpose(1, 2)
        q = apply_rope(split(self.q_proj(x), self.n_head), angles)
        k = apply_rope(split(self.k_proj(x), self.n_kv_head), angles)
        v = split(self.v_proj(x), self.n_kv_head)
        if cache is not None:
            k, v = cache.update(k, v)
        S = k.size(2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.tril[S - T:S, :S], enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))'''


# The block written from scratch (no subclass of 08's Block), as the course's reference does
_SCRATCH_BLOCK = """class _DecoderBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(config.n_embed), RMSNorm(config.n_embed)
        self.attn = _RoPEAttention(config.n_embed, config.n_head, config.n_kv_head)
        self.ffn = SwiGLU(config.n_embed, config.ffn_hidden)

    def forward(self, x, angles, cache=None):
        h = x + self.attn(self.norm1(x), angles, cache)
        return h + self.ffn(self.norm2(h))"""
_SOFTMAX_ATTENTION = """
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        mask = {mask}
        y = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v""".format(mask=_MASK)
_BLOCK_MARK = "\n\n\nclass _DecoderBlock"  # where lm()'s attention class ends
_MODEL_MARK = "\n\n\nclass DecoderLM"     # where lm()'s block class ends


def with_block(block: str, **parts) -> str:
    """lm(**parts) with its block class replaced by ``block``."""
    head, rest = lm(**parts).split(_BLOCK_MARK, 1)
    return head + "\n\n\n" + block + _MODEL_MARK + rest.split(_MODEL_MARK, 1)[1]

# A learner's own RMSNorm inside the blocks, subtracting the mean (LayerNorm without a bias)
_CENTRED_NORM = '''
class _CentredNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

'''
# SwiGLU with SiLU on the up branch instead of the gate
_SWAPPED_SWIGLU = '''
class _SwappedSwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w_down(self.w_gate(x) * F.silu(self.w_up(x)))

'''


# --- count_parameters --------------------------------------------------------------------------

_COUNT = '''
def count_parameters(config):
    C, V, hidden = config.n_embed, config.vocab_size, config.ffn_hidden
    head_dim = C // config.n_head
    attention = 2 * C * config.n_head * head_dim + 2 * C * {kv_heads} * head_dim
    per_block = attention + {ffn} + {block_norms}
    lm_head = {lm_head}
    return V * C + config.n_layer * per_block + {final_norm} + lm_head
'''


def count(kv_heads="config.n_kv_head", ffn="3 * C * hidden", block_norms="2 * C",
          lm_head="0 if config.tie_embeddings else V * C", final_norm="C") -> str:
    return _COUNT.format(kv_heads=kv_heads, ffn=ffn, block_norms=block_norms, lm_head=lm_head, final_norm=final_norm)


# --- generate ----------------------------------------------------------------------------------

_GENERATE = '''
from utils.reference import KVCache  # section 07


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    caches = [KVCache() for _ in model.blocks]
    logits, _ = model(idx, caches=caches)
    for step in range(max_new_tokens):
        last = logits[:, -1, :]
        {pick}
        idx = torch.cat([idx, next_id], dim=1)
        {feed}
    return idx
'''
_PICK = """if temperature == 0:
            next_id = last.argmax(dim=-1, keepdim=True)
        else:
            last = last / temperature
            if top_k is not None:
                kth = torch.topk(last, min(top_k, last.size(-1)), dim=-1).values[:, -1:]
                last = last.masked_fill(last < kth, float("-inf"))
            next_id = torch.multinomial(F.softmax(last, dim=-1), 1, generator=generator)"""
_FEED = "logits, _ = model(next_id, caches=caches)"


def gen(pick=_PICK, feed=_FEED) -> str:
    return _GENERATE.format(pick=pick, feed=feed)


# --- top_p_filter ------------------------------------------------------------------------------

_TOP_P = '''
def top_p_filter(logits, top_p):
    if top_p >= 1.0:
        return logits.clone()
    probs, order = torch.sort(F.softmax(logits, dim=-1), dim=-1, descending=True)
    before = probs.cumsum(dim=-1) - probs
    keep = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)
    return {result}
'''


def top_p(result="logits.masked_fill(~keep, float(\"-inf\"))", **replace) -> str:
    source = _TOP_P.format(result=result)
    for old, new in replace.items():
        assert old in source, old
        source = source.replace(old, new)
    return source


VARIANTS = [
    # --- DecoderLM ---
    right("DecoderLM", "reference", lm()),
    right("DecoderLM", "angle-table-buffer", lm(
        norm="""self.norm = RMSNorm(config.n_embed)
        table = rope_angles(config.context_length, config.n_embed // config.n_head, config.rope_base)
        self.register_buffer("angles", table, persistent=False)""",
        angles="self.angles[start:start + T]")),
    right("DecoderLM", "manual-loss-and-tied-linear", lm(
        logits="F.linear(self.norm(x), self.tok_emb.weight if cfg.tie_embeddings else self.lm_head.weight)",
        loss="""logp = F.log_softmax(logits, dim=-1)
            loss = -logp.gather(-1, targets.unsqueeze(-1)).mean()""")),
    right("DecoderLM", "sdpa-attention", lm(
        mask="torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]")),
    right("DecoderLM", "gqa-subclass-sdpa", _GQA_SUBCLASS + _BLOCK_MARK + lm().split(_BLOCK_MARK, 1)[1]),
    right("DecoderLM", "block-from-scratch", with_block(_SCRATCH_BLOCK)),
    # the model's outputs are right, but a block handed other angles (section 11 interpolates them) ignores them
    wrong("DecoderLM", "attention-ignores-angles", "block-angles-interface", lm(
        block_init="self.attn.base = config.rope_base",
        rope="""start = 0 if cache is None else len(cache)
        own = rope_angles(start + T, self.head_dim, self.base)[start:]
        q, k = apply_rope(q, own), apply_rope(k, own)""")),
    wrong("DecoderLM", "block-takes-start", "block-angles-interface", lm(
        angles="start", block_init="self.base = config.rope_base",
        block_forward="""angles = rope_angles(angles + x.size(1), self.attn.head_dim, self.base)[angles:]
        x = x + self.attn(self.norm1(x), angles, cache)
        return x + self.ffn(self.norm2(x))""")),
    wrong("DecoderLM", "no-final-norm-applied", "model-no-final-norm", lm(logits="self.lm_head(x)")),
    wrong("DecoderLM", "no-final-norm-module", "model-no-final-norm", lm(norm="pass", logits="self.lm_head(x)")),
    wrong("DecoderLM", "blocks-repeated", "blocks-shared", lm(
        blocks="nn.ModuleList([_DecoderBlock(config)] * config.n_layer)")),
    wrong("DecoderLM", "not-tied", "tie-missing", lm(tie="pass")),
    wrong("DecoderLM", "tied-through-data", "tie-missing", lm(tie="""if config.tie_embeddings:
            self.lm_head.weight.data = self.tok_emb.weight.data""")),
    wrong("DecoderLM", "always-tied", "tie-unwanted", lm(tie="self.lm_head.weight = self.tok_emb.weight")),
    wrong("DecoderLM", "positions-not-offset", "decode-positions-not-offset", lm(
        angles="rope_angles(T, cfg.n_embed // cfg.n_head, cfg.rope_base)")),
    wrong("DecoderLM", "rope-base-default", "rope-base-ignored", lm(
        angles="rope_angles(start + T, cfg.n_embed // cfg.n_head)[start:]")),
    wrong("DecoderLM", "first-cache-everywhere", "cache-one-for-all-layers", lm(
        cache="None if caches is None else caches[0]")),
    wrong("DecoderLM", "caches-not-passed", "cache-unused", lm(cache="None")),
    # the parts, localised: each is named by the first component whose input is right and output wrong
    wrong("DecoderLM", "rope-on-values", "rope-on-values", lm(
        rope="q, k, v = apply_rope(q, angles), apply_rope(k, angles), apply_rope(v, angles)")),
    wrong("DecoderLM", "no-rope", "lm-rope-missing", lm(rope="pass")),
    wrong("DecoderLM", "rope-interleaved", "rope-interleaved-layout", lm(
        prelude="from utils.reference import apply_rope_interleaved  # section 09\n",
        rope="q, k = apply_rope_interleaved(q, angles), apply_rope_interleaved(k, angles)")),
    wrong("DecoderLM", "no-causal-mask", "not-causal", lm(mask="torch.ones(T, S, dtype=torch.bool)")),
    wrong("DecoderLM", "mask-not-offset", "cache-mask-offset", lm(mask="torch.ones(T, S, dtype=torch.bool).tril()")),
    wrong("DecoderLM", "cache-output-unused", "cache-unused", lm(update="cache.update(k, v)")),
    wrong("DecoderLM", "centred-norm-inside", "lm-rmsnorm-wrong", lm(
        prelude=_CENTRED_NORM, block_init="self.norm2 = _CentredNorm(config.n_embed)")),
    wrong("DecoderLM", "swiglu-swapped-inside", "lm-swiglu-wrong", lm(
        prelude=_SWAPPED_SWIGLU, block_init="self.ffn = _SwappedSwiGLU(config.n_embed, config.ffn_hidden)")),
    wrong("DecoderLM", "no-ffn-residual", "lm-residual-missing", lm(
        block_forward="""x = x + self.attn(self.norm1(x), angles, cache)
        return self.ffn(self.norm2(x))""")),
    wrong("DecoderLM", "no-attention-residual", "lm-residual-missing", lm(
        block_forward="""x = self.attn(self.norm1(x), angles, cache)
        return x + self.ffn(self.norm2(x))""")),
    wrong("DecoderLM", "residual-from-normed", "lm-block-wiring", lm(block_forward="""h = self.norm1(x)
        x = h + self.attn(h, angles, cache)
        return x + self.ffn(self.norm2(x))""")),
    wrong("DecoderLM", "norm1-twice", "lm-block-wiring", lm(
        block_forward="""x = x + self.attn(self.norm1(x), angles, cache)
        return x + self.ffn(self.norm1(x))""")),
    # Post-Norm blocks: each sublayer reads the stream, the sum is normed (the original Transformer's order)
    wrong("DecoderLM", "post-norm", "block-post-norm", lm(
        block_forward="""x = self.norm1(x + self.attn(x, angles, cache))
        return self.norm2(x + self.ffn(x))""")),
    wrong("DecoderLM", "scale-by-model-width", "scale-by-sqrt-C", lm().replace(
        "/ math.sqrt(self.head_dim)", "/ math.sqrt(self.n_head * self.head_dim)")),
    # a scale copied from one configuration: on the first it is 1/√C, on the second nothing known: located only
    wrong("DecoderLM", "scale-hard-coded", "lm-attention-wrong", lm().replace(
        "/ math.sqrt(self.head_dim)", "/ math.sqrt(16)")),
    # no mask once there is a cache ("a cache means one new token at a time"): right without one
    wrong("DecoderLM", "no-mask-under-cache", "cache-mask-offset", lm(
        mask="torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T if cache is None else S)")),
    # the mask not offset under a cache in one configuration only (n_embed = 16): one case shows
    # cache-mask-offset's numbers, so the part is only located (confirmed on two, never named on one)
    wrong("DecoderLM", "mask-not-offset-in-one-config", "lm-attention-wrong", lm(
        mask="torch.ones(T, S, dtype=torch.bool).tril(diagonal=0 if self.head_dim * self.n_head == 16 else S - T)")),
    # k rotated after cache.update: the cached keys are rotated again by the new positions' angles (a crash)
    wrong("DecoderLM", "rope-after-cache-update", "rope-after-cache", lm(rope="pass").replace(
        "        S = k.size(2)\n",
        "        S = k.size(2)\n        q, k = apply_rope(q, angles), apply_rope(k, angles)\n")),
    # F.scaled_dot_product_attention's is_causal aligns the mask top-left: right without a cache only
    wrong("DecoderLM", "sdpa-is-causal-with-cache", "cache-mask-offset", lm().replace(_SOFTMAX_ATTENTION, """
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)""")),
    wrong("DecoderLM", "summed-loss", "loss-not-mean", lm(
        loss="loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T), reduction='sum')")),
    wrong("DecoderLM", "shifted-again", "loss-shifted-twice", lm(
        loss="loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1))")),
    # --- count_parameters ---
    right("count_parameters", "formula", count()),
    right("count_parameters", "shape-list", '''
        def count_parameters(config):
            C, V, F_ = config.n_embed, config.vocab_size, config.ffn_hidden
            Dh = C // config.n_head
            block = [(C,), (config.n_head * Dh, C), (config.n_kv_head * Dh, C), (config.n_kv_head * Dh, C),
                     (C, config.n_head * Dh), (C,), (F_, C), (F_, C), (C, F_)]
            shapes = [(V, C)] + block * config.n_layer + [(C,)]
            if not config.tie_embeddings:
                shapes.append((V, C))
            return sum(math.prod(shape) for shape in shapes)
    '''),
    right("count_parameters", "per-part", '''
        def count_parameters(config):
            C = config.n_embed
            Dh = C // config.n_head
            parts = {
                "embedding": config.vocab_size * C,
                "attention": config.n_layer * (C * C + 2 * C * config.n_kv_head * Dh + C * C),
                "ffn": config.n_layer * 3 * C * config.ffn_hidden,
                "norms": (2 * config.n_layer + 1) * C,
                "lm_head": 0 if config.tie_embeddings else config.vocab_size * C,
            }
            return sum(parts.values())
    '''),
    # the model built to count its parameters: called on the meta device, it allocates nothing (a 7B model
    # would take 27 GB), and the tensors it made name the mistake
    wrong("count_parameters", "builds-the-model", "builds-model", '''
        from utils.reference import DecoderLM  # section 10


        def count_parameters(config):
            return sum(p.numel() for p in DecoderLM(config).parameters())
    '''),
    wrong("count_parameters", "builds-the-layers", "builds-model", '''
        def count_parameters(config):
            C, V, H, Hkv, F = config.n_embed, config.vocab_size, config.n_head, config.n_kv_head, config.ffn_hidden
            D = C // H
            layers = [nn.Embedding(V, C), nn.RMSNorm(C)]
            if not config.tie_embeddings:
                layers.append(nn.Linear(C, V, bias=False))
            for _ in range(config.n_layer):
                layers += [nn.Linear(C, H * D, bias=False), nn.Linear(C, Hkv * D, bias=False),
                           nn.Linear(C, Hkv * D, bias=False), nn.Linear(H * D, C, bias=False),
                           nn.Linear(C, F, bias=False), nn.Linear(C, F, bias=False), nn.Linear(F, C, bias=False),
                           nn.RMSNorm(C), nn.RMSNorm(C)]
            return sum(p.numel() for layer in layers for p in layer.parameters())
    '''),
    # equals [param-count-no-final-norm] on the tied configurations only: one number can coincide with a
    # misconception's by accident, so a diagnosis is confirmed on the other configurations first
    wrong("count_parameters", "final-norm-only-untied", "wrong", count(final_norm="0 if config.tie_embeddings else C")),
    wrong("count_parameters", "tied-twice", "param-count-tied-twice", count(lm_head="V * C")),
    wrong("count_parameters", "untied-once", "param-count-untied-once", count(lm_head="0")),
    wrong("count_parameters", "no-norms", "param-count-no-norms", count(block_norms="0", final_norm="0")),
    wrong("count_parameters", "no-final-norm", "param-count-no-final-norm", count(final_norm="0")),
    wrong("count_parameters", "kv-as-q", "param-count-kv-as-q", count(kv_heads="config.n_head")),
    wrong("count_parameters", "ffn-two-matrices", "param-count-ffn-two-matrices", count(ffn="2 * C * hidden")),
    wrong("count_parameters", "float", "wrong-type", count(final_norm="C / 1")),
    # --- generate ---
    right("generate", "reference", gen()),
    right("generate", "preallocated-cache", _PREALLOCATED + "\n\n\n" + textwrap.dedent('''
        @torch.no_grad()
        def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
            caches = [KVCache(max_len=idx.size(1) + max_new_tokens) for _ in range(len(model.blocks))]
            logits, _ = model(idx, caches=caches)
            for step in range(max_new_tokens):
                scores = logits[:, -1]
                if temperature == 0:
                    next_id = scores.argmax(-1, keepdim=True)
                else:
                    scores = scores / temperature
                    if top_k is not None:
                        values, _ = torch.topk(scores, top_k)
                        scores[scores < values[:, [-1]]] = -float("inf")
                    next_id = torch.multinomial(scores.softmax(-1), num_samples=1, generator=generator)
                idx = torch.cat((idx, next_id), dim=1)
                if step < max_new_tokens - 1:
                    logits, _ = model(next_id, caches=caches)
            return idx
    ''').strip("\n")),
    right("generate", "categorical-inverse-cdf", gen(pick="""if temperature == 0:
            next_id = last.argmax(dim=-1, keepdim=True)
        else:
            if top_k is not None:
                top = torch.topk(last, top_k, dim=-1)
                last = torch.full_like(last, float("-inf")).scatter(-1, top.indices, top.values)
            dist = torch.distributions.Categorical(logits=last / temperature)
            u = torch.rand(last.size(0), 1, generator=generator)
            cdf = dist.probs.cumsum(dim=-1)
            next_id = torch.searchsorted(cdf, u).clamp(max=last.size(-1) - 1)""")),
    right("generate", "gumbel-max", gen(pick="""if temperature == 0:
            next_id = last.argmax(dim=-1, keepdim=True)
        else:
            scores = last / temperature
            if top_k is not None:
                kth = scores.sort(dim=-1, descending=True).values[:, top_k - 1:top_k]
                scores = torch.where(scores >= kth, scores, torch.tensor(float("-inf")))
            u = torch.rand(scores.shape, generator=generator).clamp_min(1e-20)
            next_id = (scores - torch.log(-torch.log(u))).argmax(dim=-1, keepdim=True)""")),
    right("generate", "top-k-gather", gen(pick="""if temperature == 0:
            next_id = last.argmax(dim=-1, keepdim=True)
        else:
            k = last.size(-1) if top_k is None else top_k
            values, indices = torch.topk(last / temperature, k, dim=-1)
            choice = torch.multinomial(F.softmax(values, dim=-1), 1, generator=generator)
            next_id = indices.gather(-1, choice)""")),
    wrong("generate", "no-cache", "generate-no-cache", '''
        @torch.no_grad()
        def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
            for _ in range(max_new_tokens):
                last = model(idx)[0][:, -1]
                if temperature == 0:
                    next_id = last.argmax(-1, keepdim=True)
                else:
                    last = last / temperature
                    if top_k is not None:
                        kth = torch.topk(last, top_k).values[:, -1:]
                        last = last.masked_fill(last < kth, float("-inf"))
                    next_id = torch.multinomial(F.softmax(last, -1), 1, generator=generator)
                idx = torch.cat([idx, next_id], dim=1)
            return idx
    '''),
    wrong("generate", "refeeds-cache", "generate-refeeds-cache", gen(feed="logits, _ = model(idx, caches=caches)")),
    wrong("generate", "samples-when-greedy", "generate-greedy-samples", gen(
        pick="""tau = temperature if temperature > 0 else 1.0
        next_id = torch.multinomial(F.softmax(last / tau, dim=-1), 1, generator=generator)""")),
    wrong("generate", "divides-by-zero", "generate-greedy-samples", gen(pick="""last = last / temperature
        next_id = torch.multinomial(F.softmax(last, dim=-1), 1, generator=generator)""")),
    wrong("generate", "top-k-ignored", "generate-top-k-ignored", gen(pick=_PICK.replace(
        "if top_k is not None:", "if False:"))),
    # top_k applied only from 3 on (an off-by-one guard): at k = 2 the frequencies match top_k ignored, at one k
    wrong("generate", "top-k-from-three", "generate-top-k-wrong", gen(pick=_PICK.replace(
        "if top_k is not None:", "if top_k is not None and top_k > 2:"))),
    wrong("generate", "top-k-fills-zero", "generate-top-k-wrong", gen(pick=_PICK.replace(
        'last.masked_fill(last < kth, float("-inf"))', "last.masked_fill(last < kth, 0.0)"))),
    wrong("generate", "top-k-smallest", "generate-top-k-wrong", gen(pick=_PICK.replace(
        "dim=-1).values[:, -1:]", "dim=-1, largest=False).values[:, -1:]").replace("last < kth", "last > kth"))),
    wrong("generate", "temperature-multiplied", "generate-temperature-multiplied", gen(pick=_PICK.replace(
        "last = last / temperature", "last = last * temperature"))),
    # the temperature divides the probabilities: multinomial renormalises, and it cancels out
    wrong("generate", "temperature-after-softmax", "generate-temperature-after-softmax", gen(pick=_PICK.replace(
        "last = last / temperature", "pass").replace(
        "F.softmax(last, dim=-1)", "F.softmax(last, dim=-1) / temperature"))),
    # only a temperature below 1 is applied: above 1 the frequencies match the temperature ignored, at one tau
    # only, which is no evidence of [generate-temperature-after-softmax]
    wrong("generate", "temperature-clamped", "wrong", gen(pick=_PICK.replace(
        "last = last / temperature", "last = last / min(temperature, 1.0)"))),
    wrong("generate", "global-random", "ignores-generator", gen(pick=_PICK.replace(", generator=generator)", ")"))),
    # --- top_p_filter ---
    right("top_p_filter", "reference", top_p()),
    right("top_p_filter", "row-loop", '''
        def top_p_filter(logits, top_p):
            rows = logits.reshape(-1, logits.size(-1))
            out = torch.full_like(rows, float("-inf"))
            for r, row in enumerate(rows):
                probs = torch.softmax(row.double(), dim=0)
                total = 0.0
                for v in torch.argsort(probs, descending=True).tolist():
                    out[r, v] = row[v]
                    total += probs[v].item()
                    if total >= top_p and top_p < 1.0:
                        break
            return out.reshape(logits.shape)
    '''),
    right("top_p_filter", "ascending-tail-scatter", '''
        def top_p_filter(logits, top_p):
            # transformers' TopPLogitsWarper: remove the least probable tokens whose total stays within 1 - top_p
            sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
            tail = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
            tail[..., -1] = False
            remove = tail.scatter(-1, order, tail)
            return logits.masked_fill(remove, -float("inf"))
    '''),
    right("top_p_filter", "probability-threshold", '''
        def top_p_filter(logits, top_p):
            probs = logits.softmax(-1)
            ranked = probs.sort(-1, descending=True).values
            n_keep = ((ranked.cumsum(-1) - ranked) < top_p).sum(-1, keepdim=True)
            if top_p >= 1:
                n_keep = torch.full_like(n_keep, logits.size(-1))
            threshold = ranked.gather(-1, n_keep - 1)
            return torch.where(probs >= threshold, logits, torch.full_like(logits, float("-inf")))
    '''),
    wrong("top_p_filter", "drops-crossing", "top-p-drops-crossing", top_p(
        **{"before < top_p": "probs.cumsum(dim=-1) < top_p"})),
    wrong("top_p_filter", "ascending", "top-p-ascending", top_p(**{"descending=True": "descending=False"})),
    wrong("top_p_filter", "cumsum-of-logits", "top-p-not-probabilities", top_p(
        **{"F.softmax(logits, dim=-1)": "logits"})),
    wrong("top_p_filter", "cumsum-of-exp", "top-p-not-probabilities", top_p(
        **{"F.softmax(logits, dim=-1)": "logits.exp()"})),
    wrong("top_p_filter", "whole-batch", "top-p-whole-batch", '''
        def top_p_filter(logits, top_p):
            if top_p >= 1.0:
                return logits.clone()
            flat = logits.reshape(-1)
            probs, order = torch.sort(F.softmax(flat, dim=-1), descending=True)
            keep = torch.zeros_like(flat, dtype=torch.bool)
            keep[order] = probs.cumsum(0) - probs < top_p
            return logits.masked_fill(~keep.reshape(logits.shape), float("-inf"))
    '''),
    wrong("top_p_filter", "mask-not-unsorted", "top-p-mask-order", top_p(
        **{"torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)": "before < top_p"})),
    # the sorted keep-mask read through the sort's indices (gather) instead of written to them (scatter)
    wrong("top_p_filter", "gather-not-scatter", "top-p-gather-not-scatter", top_p(
        **{"torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)":
           "(before < top_p).gather(-1, order)"})),
    # the inverse permutation by argsort, then gather: right
    right("top_p_filter", "argsort-gather", top_p(
        **{"torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)":
           "(before < top_p).gather(-1, order.argsort(dim=-1))"})),
    wrong("top_p_filter", "one-not-guarded", "top-p-one-drops", top_p(
        **{"    if top_p >= 1.0:\n        return logits.clone()\n": ""})),
    wrong("top_p_filter", "returns-probabilities", "top-p-returns-probs", top_p(
        result="F.softmax(logits, dim=-1).masked_fill(~keep, 0.0)")),
    wrong("top_p_filter", "fills-zero", "top-p-fill-not-neg-inf", top_p(result="logits.masked_fill(~keep, 0.0)")),
    wrong("top_p_filter", "in-place", "modified-input", top_p(result="logits.masked_fill_(~keep, float(\"-inf\"))")),
    # a single row squeezed to a vector: right for every batch but one sequence
    wrong("top_p_filter", "squeezes-one-row", "top-p-leading-dims", top_p(
        **{"    if top_p >= 1.0:": "    logits = logits.squeeze(0)\n    if top_p >= 1.0:"})),
    wrong("top_p_filter", "rows-are-dim-0", "top-p-leading-dims", '''
        def top_p_filter(logits, top_p):
            out = logits.clone()
            for r in range(logits.size(0)):
                probs, order = torch.sort(F.softmax(logits[r], dim=0), descending=True)
                drop = order[(probs.cumsum(0) - probs >= top_p) & (top_p < 1.0)]
                out[r, drop] = float("-inf")
            return out
    '''),
]
