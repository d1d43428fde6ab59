"""Bug bank of 08_ffn_norm_residual."""
from . import right, wrong

# Block's solution builds the learner's own RMSNorm and SwiGLU (cells above it in the notebook).
DEPENDS = {"Block": ("RMSNorm", "SwiGLU")}

# --- RMSNorm ---------------------------------------------------------------------------------

_RMS = '''
class RMSNorm(nn.Module):
    def __init__(self, dim, eps={eps}):
        super().__init__()
        self.eps = eps
        {weight}

    def forward(self, x):
        {body}
'''
_RMS_BODY = """h = x.float()
        h = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return h.to(x.dtype) * self.weight"""
# The same formula in the input's own dtype: right in float32, overflows for a float16 module.
_RMS_NAIVE = "return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight"


def rms(body=_RMS_BODY, eps="1e-6", weight="self.weight = nn.Parameter(torch.ones(dim))") -> str:
    return _RMS.format(body=body, eps=eps, weight=weight)


# --- layer_norm ------------------------------------------------------------------------------

_LN = '''
def layer_norm(x, weight, bias, eps={eps}):
    mean = x.mean(dim=-1, keepdim=True)
    {var}
    return {out}
'''
_LN_VAR = "var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)"
_LN_OUT = "(x - mean) / torch.sqrt(var + eps) * weight + bias"


def ln(var=_LN_VAR, out=_LN_OUT, eps="1e-5") -> str:
    return _LN.format(var=var, out=out, eps=eps)


# --- FeedForward / SwiGLU --------------------------------------------------------------------

_FFN = '''
class FeedForward(nn.Module):
    def __init__(self, n_embed, hidden=None):
        super().__init__()
        {init}

    def forward(self, x):
        {body}
'''
_FFN_INIT = """hidden = hidden or 4 * n_embed
        self.fc1 = nn.Linear(n_embed, hidden)
        self.fc2 = nn.Linear(hidden, n_embed)"""


def ffn(body="return self.fc2(F.gelu(self.fc1(x)))", init=_FFN_INIT) -> str:
    return _FFN.format(body=body, init=init)


_SWIGLU = '''
class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        {init}

    def forward(self, x):
        {body}
'''
_SWIGLU_INIT = """self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)"""


def swiglu(body="return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))", init=_SWIGLU_INIT) -> str:
    return _SWIGLU.format(body=body, init=init)


# --- Block -----------------------------------------------------------------------------------
# In the notebook the learner's RMSNorm and SwiGLU are defined in the cells above the Block cell;
# the bank's loader runs one cell's source alone, so a Block variant repeats right versions of them.

_BLOCK = '''
from utils.reference import CausalSelfAttention

''' + rms().strip("\n") + "\n\n" + swiglu().strip("\n") + '''


class Block(nn.Module):
    def __init__(self, n_embed, n_head, context_length, ffn_hidden=None):
        super().__init__()
        self.norm1 = {norm}
        self.attn = CausalSelfAttention(n_embed, n_head, context_length)
        self.norm2 = {norm2}
        self.ffn = SwiGLU(n_embed, {hidden})

    def forward(self, x):
        {body}
'''
_BLOCK_BODY = """x = x + self.attn(self.norm1(x))
        x = x + self.ffn(self.norm2(x))
        return x"""


def block(body=_BLOCK_BODY, norm="RMSNorm(n_embed)", norm2=None, hidden="ffn_hidden or 4 * n_embed") -> str:
    return _BLOCK.format(body=body, norm=norm, norm2=norm2 or norm, hidden=hidden)


# --- quiz_ffn_share --------------------------------------------------------------------------

_QUIZ = '''
def quiz_ffn_share():
    D, hidden, T = {D}, 13824, 4096
    attn, ffn, expert = {attn}, {ffn}, {expert}
    return {{"attn_params": attn, "ffn_params": ffn, "ffn_share": {share},
            "moe_total_ffn": 8 * expert, "moe_active_ffn": {active}, "ffn_flops_share": {flops}}}
'''
_FLOPS = "2 * ffn / (2 * attn + 4 * T * D + 2 * ffn)"


def quiz(D="5120", attn="4 * D * D", ffn="3 * D * hidden", expert="3 * 6144 * 16384", share="ffn / (attn + ffn)",
         active="2 * expert", flops=_FLOPS) -> str:
    return _QUIZ.format(D=D, attn=attn, ffn=ffn, expert=expert, share=share, active=active, flops=flops)


VARIANTS = [
    # --- RMSNorm ---
    right("RMSNorm", "sqrt", rms()),
    right("RMSNorm", "llama-rsqrt", rms(body="""h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.type_as(x)""")),
    right("RMSNorm", "norm-sqrt-d", rms(body="""d, h = x.size(-1), x.double()
        y = h * math.sqrt(d) / torch.sqrt(h.norm(dim=-1, keepdim=True) ** 2 + d * self.eps)
        return y.to(x.dtype) * self.weight""")),
    right("RMSNorm", "square-sum-weight-last-cast", rms(body="""h = x.float()
        ms = (h * h).sum(dim=-1, keepdim=True) / h.shape[-1]
        return (self.weight.float() * (h / (ms + self.eps).sqrt())).to(x.dtype)""")),
    wrong("RMSNorm", "input-dtype", "rmsnorm-low-precision", rms(body=_RMS_NAIVE)),
    wrong("RMSNorm", "input-dtype-rsqrt", "rmsnorm-low-precision", rms(
        body="return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight")),
    wrong("RMSNorm", "float32-out", "rmsnorm-dtype", rms(body="""h = x.float()
        return h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight""")),
    wrong("RMSNorm", "float32-weight-out", "rmsnorm-dtype", rms(body="""h = x.float()
        h = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return h * self.weight.float()""")),
    wrong("RMSNorm", "subtracts-mean", "rmsnorm-subtracts-mean", rms(body="""x = x - x.mean(dim=-1, keepdim=True)
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight""")),
    wrong("RMSNorm", "eps-outside-sqrt", "norm-eps-outside-sqrt", rms(
        body="return x / (torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) + self.eps) * self.weight")),
    wrong("RMSNorm", "eps-outside-norm", "norm-eps-outside-sqrt", rms(
        body="return x / (x.norm(dim=-1, keepdim=True) / math.sqrt(x.size(-1)) + self.eps) * self.weight")),
    wrong("RMSNorm", "bessel", "rmsnorm-bessel", rms(
        body="return x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) / (x.size(-1) - 1) + self.eps) * self.weight")),
    # the batch dimension squeezed away: right for every batch but a single sequence
    wrong("RMSNorm", "squeezes-batch", "wrong-shape", rms(
        body="x = x.squeeze(0)\n        " + _RMS_NAIVE)),
    wrong("RMSNorm", "sum-of-squares", "rmsnorm-sum-not-mean", rms(
        body="return x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + self.eps) * self.weight")),
    wrong("RMSNorm", "norm-not-rms", "rmsnorm-sum-not-mean", rms(
        body="return x / (x.norm(dim=-1, keepdim=True) + self.eps) * self.weight")),
    wrong("RMSNorm", "std", "rmsnorm-subtracts-mean", rms(
        body="return x / torch.sqrt(x.var(dim=-1, keepdim=True) + self.eps) * self.weight")),
    wrong("RMSNorm", "wrong-dim", "norm-wrong-dim", rms(
        body="return x / torch.sqrt(x.pow(2).mean(dim=0, keepdim=True) + self.eps) * self.weight")),
    wrong("RMSNorm", "whole-tensor", "norm-wrong-dim", rms(
        body="return x / torch.sqrt(x.pow(2).mean() + self.eps) * self.weight")),
    wrong("RMSNorm", "no-eps", "norm-eps-missing", rms(
        body="return x / x.pow(2).mean(-1, keepdim=True).sqrt() * self.weight")),
    wrong("RMSNorm", "no-sqrt", "norm-missing-sqrt", rms(
        body="return x / (x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight")),
    wrong("RMSNorm", "no-weight", "norm-weight-ignored", rms(
        body="return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)")),
    wrong("RMSNorm", "eps-1e-5", "norm-eps-default", rms(eps="1e-5")),
    wrong("RMSNorm", "eps-hardcoded", "norm-eps-ignored", rms(
        body="return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.weight")),
    wrong("RMSNorm", "weight-zeros", "norm-weight", rms(weight="self.weight = nn.Parameter(torch.zeros(dim))")),
    wrong("RMSNorm", "weight-tensor", "norm-weight", rms(weight="self.weight = torch.ones(dim)")),
    right("RMSNorm", "mean-square-float32-only", rms(body="""ms = x.float().pow(2).mean(dim=-1, keepdim=True)
        return x / torch.sqrt(ms + self.eps).to(x.dtype) * self.weight""")),
    wrong("RMSNorm", "cast-back-to-half", "rmsnorm-dtype", rms(body="""h = x.float()
        h = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (h * self.weight).half()""")),
    wrong("RMSNorm", "builtin", "uses-builtin-norm", rms(
        body="return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)")),
    # --- layer_norm ---
    right("layer_norm", "two-pass", ln()),
    right("layer_norm", "var-unbiased-false", ln(var="var = x.var(dim=-1, unbiased=False, keepdim=True)")),
    right("layer_norm", "rsqrt-e-x2", ln(var="var = (x * x).mean(dim=-1, keepdim=True) - mean ** 2",
                                         out="(x - mean) * torch.rsqrt(var + eps) * weight + bias")),
    right("layer_norm", "var-mean", """
        def layer_norm(x, weight, bias, eps=1e-5):
            var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
            return weight * (x - mean) / (var + eps).sqrt() + bias
    """),
    wrong("layer_norm", "unbiased", "layernorm-unbiased-var", ln(var="var = x.var(dim=-1, keepdim=True)")),
    wrong("layer_norm", "std-unbiased", "layernorm-unbiased-var", ln(
        var="std = x.std(dim=-1, keepdim=True)", out="(x - mean) / torch.sqrt(std ** 2 + eps) * weight + bias")),
    wrong("layer_norm", "no-mean", "layernorm-no-mean", ln(out="x / torch.sqrt(var + eps) * weight + bias")),
    wrong("layer_norm", "eps-outside-sqrt", "norm-eps-outside-sqrt", ln(
        out="(x - mean) / (var.sqrt() + eps) * weight + bias")),
    wrong("layer_norm", "wrong-dim", "norm-wrong-dim", """
        def layer_norm(x, weight, bias, eps=1e-5):
            mean = x.mean(dim=0, keepdim=True)
            var = x.var(dim=0, unbiased=False, keepdim=True)
            return (x - mean) / torch.sqrt(var + eps) * weight + bias
    """),
    wrong("layer_norm", "no-bias", "norm-bias-ignored", ln(out="(x - mean) / torch.sqrt(var + eps) * weight")),
    wrong("layer_norm", "no-weight-no-bias", "norm-weight-ignored", ln(out="(x - mean) / torch.sqrt(var + eps)")),
    wrong("layer_norm", "var-not-centred", "layernorm-var-uncentered", ln(
        var="var = (x ** 2).mean(dim=-1, keepdim=True)")),
    wrong("layer_norm", "eps-default", "norm-eps-default", ln(eps="1e-6")),
    wrong("layer_norm", "builtin", "uses-builtin-norm", """
        def layer_norm(x, weight, bias, eps=1e-5):
            return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
    """),
    # --- FeedForward ---
    right("FeedForward", "functional", ffn()),
    right("FeedForward", "sequential", ffn(init="""hidden = 4 * n_embed if hidden is None else hidden
        self.fc1 = nn.Linear(n_embed, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, n_embed)""", body="return self.fc2(self.act(self.fc1(x)))")),
    right("FeedForward", "gelu-tanh", ffn(body="return self.fc2(F.gelu(self.fc1(x), approximate='tanh'))")),
    wrong("FeedForward", "relu", "ffn-wrong-activation", ffn(body="return self.fc2(F.relu(self.fc1(x)))")),
    wrong("FeedForward", "gelu-after-fc2", "ffn-activation-after-fc2", ffn(
        body="return F.gelu(self.fc2(self.fc1(x)))")),
    wrong("FeedForward", "no-activation", "ffn-no-activation", ffn(body="return self.fc2(self.fc1(x))")),
    wrong("FeedForward", "hidden-default-n", "ffn-hidden-default", ffn(init="""hidden = hidden or n_embed
        self.fc1 = nn.Linear(n_embed, hidden)
        self.fc2 = nn.Linear(hidden, n_embed)""")),
    wrong("FeedForward", "no-bias", "ffn-layout", ffn(init="""hidden = hidden or 4 * n_embed
        self.fc1 = nn.Linear(n_embed, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, n_embed, bias=False)""")),
    # --- SwiGLU ---
    right("SwiGLU", "seed", swiglu()),
    right("SwiGLU", "sigmoid-by-hand", swiglu(body="""g = self.w_gate(x)
        return self.w_down(g * torch.sigmoid(g) * self.w_up(x))""")),
    right("SwiGLU", "fused-gate-up", swiglu(body="""w = torch.cat([self.w_gate.weight, self.w_up.weight], dim=0)
        gate, up = F.linear(x, w).chunk(2, dim=-1)
        return self.w_down(F.silu(gate) * up)""")),
    right("SwiGLU", "silu-module-up-first", swiglu(init=_SWIGLU_INIT + """
        self.act = nn.SiLU()""", body="""up = self.w_up(x)
        return self.w_down(up * self.act(self.w_gate(x)))""")),
    wrong("SwiGLU", "down-per-branch", "swiglu-down-per-branch", swiglu(
        body="return self.w_down(F.silu(self.w_gate(x))) * self.w_down(self.w_up(x))")),
    wrong("SwiGLU", "silu-on-up", "swiglu-silu-on-up", swiglu(
        body="return self.w_down(F.silu(self.w_gate(x)) * F.silu(self.w_up(x)))")),
    wrong("SwiGLU", "silu-on-product", "swiglu-silu-on-product", swiglu(
        body="return self.w_down(F.silu(self.w_gate(x) * self.w_up(x)))")),
    wrong("SwiGLU", "gate-up-swapped", "swiglu-gate-up-swapped", swiglu(
        body="return self.w_down(self.w_gate(x) * F.silu(self.w_up(x)))")),
    wrong("SwiGLU", "gelu", "swiglu-gelu", swiglu(body="return self.w_down(F.gelu(self.w_gate(x)) * self.w_up(x))")),
    wrong("SwiGLU", "sigmoid", "swiglu-sigmoid", swiglu(
        body="return self.w_down(torch.sigmoid(self.w_gate(x)) * self.w_up(x))")),
    wrong("SwiGLU", "no-up", "swiglu-no-gate", swiglu(body="return self.w_down(F.silu(self.w_gate(x)))")),
    wrong("SwiGLU", "bias", "ffn-layout", swiglu(init="""self.w_gate = nn.Linear(dim, hidden)
        self.w_up = nn.Linear(dim, hidden)
        self.w_down = nn.Linear(hidden, dim)""")),
    wrong("SwiGLU", "fused-split-wrong", "swiglu-gate-up-swapped", swiglu(
        body="""w = torch.cat([self.w_gate.weight, self.w_up.weight], dim=0)
        up, gate = F.linear(x, w).chunk(2, dim=-1)
        return self.w_down(F.silu(gate) * up)""")),
    # --- Block ---
    right("Block", "seed", block()),
    right("Block", "torch-rmsnorm-named", block(norm="nn.RMSNorm(n_embed, eps=1e-6)")),
    right("Block", "residual-names", block(body="""h = x + self.attn(self.norm1(x))
        out = h + self.ffn(self.norm2(h))
        return out""", hidden="4 * n_embed if ffn_hidden is None else ffn_hidden")),
    right("Block", "named-steps", block(body="""h = self.norm1(x)
        x = x + self.attn(h)
        h = self.norm2(x)
        return x + self.ffn(h)""")),
    wrong("Block", "post-norm-second", "block-post-norm", block(body="""x = x + self.attn(self.norm1(x))
        return self.norm2(x + self.ffn(x))""")),
    wrong("Block", "no-norm-before-ffn", "block-norm-missing", block(body="""x = x + self.attn(self.norm1(x))
        return x + self.ffn(x)""")),
    wrong("Block", "no-norm-before-attn", "block-norm-missing", block(body="""x = x + self.attn(x)
        return x + self.ffn(self.norm2(x))""")),
    wrong("Block", "post-norm", "block-post-norm", block(body="""x = self.norm1(x + self.attn(x))
        x = self.norm2(x + self.ffn(x))
        return x""")),
    wrong("Block", "no-residual", "block-no-residual", block(body="""x = self.attn(self.norm1(x))
        x = self.ffn(self.norm2(x))
        return x""")),
    wrong("Block", "no-ffn-residual", "block-no-residual", block(body="""x = x + self.attn(self.norm1(x))
        return self.ffn(self.norm2(x))""")),
    wrong("Block", "residual-from-normed", "block-residual-from-normed", block(body="""x = self.norm1(x)
        x = x + self.attn(x)
        x = self.norm2(x)
        return x + self.ffn(x)""")),
    wrong("Block", "parallel", "block-parallel", block(
        body="return x + self.attn(self.norm1(x)) + self.ffn(self.norm2(x))")),
    wrong("Block", "ffn-first", "block-ffn-first", block(body="""x = x + self.ffn(self.norm1(x))
        x = x + self.attn(self.norm2(x))
        return x""")),
    wrong("Block", "one-norm-twice", "block-norms-mixed", block(body="""x = x + self.attn(self.norm1(x))
        x = x + self.ffn(self.norm1(x))
        return x""")),
    wrong("Block", "hidden-default", "ffn-hidden-default", block(hidden="ffn_hidden or n_embed")),
    wrong("Block", "layernorm", "block-layout", block(norm="nn.LayerNorm(n_embed)")),
    # --- quiz_ffn_share ---
    right("quiz_ffn_share", "computed", """
        def quiz_ffn_share():
            D, hidden, T = 5120, 13824, 4096
            attn, ffn = 4 * D * D, 3 * D * hidden
            expert = 3 * 6144 * 16384
            return {"attn_params": attn, "ffn_params": ffn, "ffn_share": ffn / (attn + ffn),
                    "moe_total_ffn": 8 * expert, "moe_active_ffn": 2 * expert,
                    "ffn_flops_share": 2 * ffn / (2 * attn + 4 * T * D + 2 * ffn)}
    """),
    right("quiz_ffn_share", "rounded", """
        def quiz_ffn_share():
            return {"attn_params": 104857600, "ffn_params": 212336640, "ffn_share": 0.6694,
                    "moe_total_ffn": 2415919104, "moe_active_ffn": 603979776, "ffn_flops_share": 0.5912}
    """),
    wrong("quiz_ffn_share", "attn-3", "quiz-attn-no-out-proj", quiz(attn="3 * D * D")),
    wrong("quiz_ffn_share", "two-matrices", "quiz-swiglu-two-matrices", quiz(ffn="2 * D * hidden")),
    wrong("quiz_ffn_share", "classic-width", "quiz-ffn-classic-width", quiz(ffn="2 * D * 4 * D")),
    wrong("quiz_ffn_share", "expert-two-matrices", "quiz-swiglu-two-matrices", quiz(expert="2 * 6144 * 16384")),
    wrong("quiz_ffn_share", "ratio", "quiz-ffn-share-ratio", quiz(share="ffn / attn")),
    wrong("quiz_ffn_share", "percent", "quiz-share-percent", quiz(share="100 * ffn / (attn + ffn)")),
    wrong("quiz_ffn_share", "active-all", "quiz-moe-active-all", quiz(active="8 * expert")),
    wrong("quiz_ffn_share", "top1", "quiz-moe-top1", quiz(active="expert")),
    wrong("quiz_ffn_share", "missing-key", "quiz-missing-key", """
        def quiz_ffn_share():
            return {"attn_params": 4 * 5120 ** 2, "ffn_params": 3 * 5120 * 13824}
    """),
    right("quiz_ffn_share", "float-counts", quiz(D="5120.0")),     # a number is a number (one rule, 00 §2.2)
    wrong("quiz_ffn_share", "flops-no-scores", "quiz-ffn-flops-no-scores", quiz(flops="ffn / (attn + ffn)")),
    wrong("quiz_ffn_share", "flops-off", "wrong", quiz(flops="0.5")),       # a wrong share the visible check catches
    wrong("quiz_ffn_share", "flops-percent", "quiz-share-percent", quiz(flops=f"100 * ({_FLOPS})")),
    wrong("quiz_ffn_share", "flops-missing", "quiz-missing-key", """
        def quiz_ffn_share():
            D, hidden = 5120, 13824
            attn, ffn, expert = 4 * D * D, 3 * D * hidden, 3 * 6144 * 16384
            return {"attn_params": attn, "ffn_params": ffn, "ffn_share": ffn / (attn + ffn),
                    "moe_total_ffn": 8 * expert, "moe_active_ffn": 2 * expert}
    """),
    # --- a known mistake's numbers on one case only: no diagnosis (compare.confirmed) ---
    # the sum of squares divided by the batch size: on a single sequence (x.size(0) = 1) exactly
    # [rmsnorm-sum-not-mean], on every other input something else
    wrong("RMSNorm", "divides-by-batch-size", "wrong", rms(
        body="return x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) / x.size(0) + self.eps) * self.weight")),
    # planted: each mistake on the inputs of width 7 alone, right everywhere else
    wrong("layer_norm", "var-uncentred-on-one-input", "wrong", ln(
        var="var = (x ** 2 if x.size(-1) == 7 else (x - mean) ** 2).mean(dim=-1, keepdim=True)")),
    wrong("layer_norm", "bias-dropped-on-one-input", "wrong", ln(
        out="(x - mean) / torch.sqrt(var + eps) * weight + (0 if x.size(-1) == 7 else bias)")),
    # planted: each mistake on the inputs of 3 positions alone
    wrong("FeedForward", "gelu-after-fc2-on-one-input", "wrong", ffn(
        body="return F.gelu(self.fc2(self.fc1(x))) if x.size(1) == 3 else self.fc2(F.gelu(self.fc1(x)))")),
    wrong("SwiGLU", "silu-on-product-on-one-input", "wrong", swiglu(body="""g, u = self.w_gate(x), self.w_up(x)
        return self.w_down(F.silu(g * u) if x.size(1) == 3 else F.silu(g) * u)""")),
]
