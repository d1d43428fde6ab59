"""Bug bank of 10_decoder_only_model."""
import textwrap

from . import right, s07, wrong

# section 07's preallocated KV cache (a right KVCache variant there): generate must work with any cache
_PREALLOCATED = next(v.source for v in s07.VARIANTS if v.id == "KVCache-preallocated")

# --- DecoderLM ---------------------------------------------------------------------------------
# In the notebook DecoderBlock is given (an export cell) and RMSNorm / rope_angles come from earlier
# sections; the bank's loader runs one cell's source alone, so each variant imports them.

_LM = '''
from utils.reference import RMSNorm  # section 08
from utils.reference import rope_angles  # section 09
from utils.reference.s10_decoder_only_model import DecoderBlock


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
_BLOCKS = "nn.ModuleList([DecoderBlock(config) for _ in range(config.n_layer)])"
_TIE = """if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight"""
_ANGLES = "rope_angles(start + T, cfg.n_embed // cfg.n_head, cfg.rope_base)[start:]"


def lm(blocks=_BLOCKS, norm="self.norm = RMSNorm(config.n_embed)", tie=_TIE, angles=_ANGLES,
       cache="None if caches is None else caches[i]", logits="self.lm_head(self.norm(x))",
       loss="loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))") -> str:
    return _LM.format(blocks=blocks, norm=norm, tie=tie, angles=angles, cache=cache, logits=logits, loss=loss)


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


# --- the quizzes -------------------------------------------------------------------------------

_READ = '''
def quiz_read_config():
    return {{"llama3_8b_params": {a}, "llama3_8b_kv_bytes_per_token": {b}, "mixtral_total_params": {c},
            "mixtral_active_params": {d}, "mixtral_flops_per_token": {e}}}
'''


def read(a="8_030_261_248", b="2 * 32 * 8 * 128 * 2", c="46_702_792_704", d="12_879_925_248",
         e="2 * 12_879_925_248") -> str:
    return _READ.format(a=a, b=b, c=c, d=d, e=e)


_MYTHS = '''
def quiz_misconceptions():
    return {{"weights_explain": {a}, "heads_learned": {b}, "flash_is_sparse": {c}, "rope_window_enough": {d},
            "training_parallel": {e}}}
'''


def myths(a="False", b="True", c="False", d="False", e="True") -> str:
    return _MYTHS.format(a=a, b=b, c=c, d=d, e=e)


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
    wrong("DecoderLM", "no-final-norm-applied", "model-no-final-norm", lm(logits="self.lm_head(x)")),
    wrong("DecoderLM", "no-final-norm-module", "model-no-final-norm", lm(norm="pass", logits="self.lm_head(x)")),
    wrong("DecoderLM", "blocks-repeated", "blocks-shared", lm(
        blocks="nn.ModuleList([DecoderBlock(config)] * config.n_layer)")),
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
    wrong("generate", "top-k-fills-zero", "generate-top-k-wrong", gen(pick=_PICK.replace(
        'last.masked_fill(last < kth, float("-inf"))', "last.masked_fill(last < kth, 0.0)"))),
    wrong("generate", "top-k-smallest", "generate-top-k-wrong", gen(pick=_PICK.replace(
        "dim=-1).values[:, -1:]", "dim=-1, largest=False).values[:, -1:]").replace("last < kth", "last > kth"))),
    wrong("generate", "temperature-multiplied", "generate-temperature-multiplied", gen(pick=_PICK.replace(
        "last = last / temperature", "last = last * temperature"))),
    wrong("generate", "global-random", "ignores-generator", gen(pick=_PICK.replace(", generator=generator)", ")"))),
    # --- quiz_read_config ---
    right("quiz_read_config", "exact", read()),
    right("quiz_read_config", "published-rounded", read(a="8.03e9", b="131072", c="46.7e9", d="12.9e9", e="25.8e9")),
    right("quiz_read_config", "flops-without-embedding", read(e="2 * (12_879_925_248 - 32000 * 4096)")),
    wrong("quiz_read_config", "tied-assumed", "quiz-config-tied-assumed", read(a="8_030_261_248 - 128256 * 4096")),
    wrong("quiz_read_config", "kv-as-q-params", "quiz-config-kv-as-q", read(a="8_835_567_616")),
    wrong("quiz_read_config", "kv-as-q-bytes", "quiz-config-kv-as-q", read(b="2 * 32 * 32 * 128 * 2")),
    wrong("quiz_read_config", "kv-no-factor-2", "quiz-kv-no-factor-2", read(b="32 * 8 * 128 * 2")),
    wrong("quiz_read_config", "kv-in-kib", "quiz-config-units", read(b="128")),
    wrong("quiz_read_config", "eight-times-seven", "quiz-moe-name-is-size", read(c="56e9")),
    wrong("quiz_read_config", "one-expert-total", "quiz-moe-experts-missing", read(c="7_242_780_672")),
    wrong("quiz_read_config", "total-is-active", "quiz-moe-total-is-active", read(c="12_879_925_248")),
    wrong("quiz_read_config", "active-all", "quiz-moe-active-all", read(d="46_702_792_704")),
    wrong("quiz_read_config", "flops-total", "quiz-flops-total-params", read(e="2 * 46_702_792_704")),
    wrong("quiz_read_config", "flops-no-2", "quiz-flops-no-factor-2", read(e="12_879_925_248")),
    wrong("quiz_read_config", "flops-training", "quiz-flops-training", read(e="6 * 12_879_925_248")),
    wrong("quiz_read_config", "missing-key", "quiz-missing-key", '''
        def quiz_read_config():
            return {"llama3_8b_params": 8.03e9}
    '''),
    # --- quiz_misconceptions ---
    right("quiz_misconceptions", "literal", myths()),
    right("quiz_misconceptions", "zipped", '''
        def quiz_misconceptions():
            keys = ["weights_explain", "heads_learned", "flash_is_sparse", "rope_window_enough", "training_parallel"]
            return dict(zip(keys, [False, True, False, False, True]))
    '''),
    wrong("quiz_misconceptions", "weights-explain", "quiz-myth-weights-explain", myths(a="True")),
    wrong("quiz_misconceptions", "heads-designed", "quiz-myth-heads-designed", myths(b="False")),
    wrong("quiz_misconceptions", "flash-sparse", "quiz-myth-flash-sparse", myths(c="True")),
    wrong("quiz_misconceptions", "rope-window", "quiz-myth-rope-window", myths(d="True")),
    wrong("quiz_misconceptions", "training-sequential", "quiz-myth-training-sequential", myths(e="False")),
    wrong("quiz_misconceptions", "strings", "wrong-type", myths(a='"False"')),
]
