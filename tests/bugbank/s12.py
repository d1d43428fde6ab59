"""Bug bank of 12_what_heads_learn.

head_ablation_losses is handed the section's given AttentionOnlyLM; its wrong variants include learners who
switch heads off with forward hooks instead of head_mask (on the residual stream, after o_proj) and right ones
that do it with a pre-hook on o_proj's input or by zeroing o_proj's columns and restoring them."""
from . import fits_visible, right, wrong

# --- previous_token_score --------------------------------------------------------------------------

_PREV = '''
def previous_token_score(pattern):
    {body}
'''


def prev(body: str) -> str:
    return _PREV.format(body=body)


# --- induction_score -------------------------------------------------------------------------------

_INDUCTION = '''
def induction_score(pattern, period):
    T = pattern.size(-1)
    t = torch.arange(period, T)
    return {picked}.mean(dim=-1)
'''


def induction(picked: str) -> str:
    return _INDUCTION.format(picked=picked)


# --- head_ablation_losses --------------------------------------------------------------------------

_ABLATION = '''
def head_ablation_losses(model, tokens, period):
    L, H = model.config.n_layer, model.config.n_head
    out = torch.zeros(L, H)
    with torch.no_grad():
        for layer in range(L):
            for head in range(H):
                {mask}
                logits, loss = model({fed}, head_mask=mask)
                out[layer, head] = {loss}
    return out
'''
_ONE_OFF = "mask = torch.ones(L, H); mask[layer, head] = 0"
_REPEATED = "F.cross_entropy(logits[:, period - 1:-1].reshape(-1, logits.size(-1)), tokens[:, period:].reshape(-1))"


def ablation(mask: str = _ONE_OFF, loss: str = _REPEATED, fed: str = "tokens") -> str:
    return _ABLATION.format(mask=mask, loss=loss, fed=fed)


_ON_OUTPUT = """def switch_off(module, inputs, output):
                output = output.clone()
                output[{zero}] = 0
                return output
            handle = {where}.register_forward_hook(switch_off)"""
_ON_INPUT = """def switch_off(module, args):
                x = args[0].clone()
                x[{zero}] = 0
                return (x, *args[1:])
            handle = {where}.register_forward_pre_hook(switch_off)"""


def hooked(where: str, zero: str, pre: bool = False) -> str:
    """Switching a head off with a forward hook on `where` (a module of block `layer`) that zeroes `zero` of its
    output, or (pre) with a forward pre-hook that zeroes `zero` of its first input."""
    hook = (_ON_INPUT if pre else _ON_OUTPUT).format(where=where, zero=zero)
    return f'''
def head_ablation_losses(model, tokens, period):
    L, H = model.config.n_layer, model.config.n_head
    Dh = model.config.n_embed // H
    out = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            {hook}
            try:
                with torch.no_grad():
                    logits, _ = model(tokens)
            finally:
                handle.remove()
            out[layer, head] = F.cross_entropy(logits[:, period - 1:-1].transpose(1, 2), tokens[:, period:])
    return out
'''


# --- quiz_induction_heads --------------------------------------------------------------------------

_QUIZ = '''
def quiz_induction_heads():
    return {{"induction_key": {a}, "uniform_prev_score": {b}, "previous_token_layer": {c}, "induction_layer": {d},
            "first_half_loss": {e}, "repeated_part_floor": {f}}}
'''


def quiz(a="14", b="sum(1 / (t + 1) for t in range(1, 6)) / 5", c="0", d="1", e="math.log(50)",
         f="math.log(50) / 12") -> str:
    return _QUIZ.format(a=a, b=b, c=c, d=d, e=e, f=f)


VARIANTS = [
    # --- previous_token_score ---
    right("previous_token_score", "diagonal", prev("return pattern.diagonal(-1, -2, -1).mean(-1)")),
    right("previous_token_score", "arange-index", '''
        def previous_token_score(pattern):
            t = torch.arange(1, pattern.size(-1))
            return pattern[..., t, t - 1].mean(dim=-1)
    '''),
    right("previous_token_score", "stacked-then-mean-first", '''
        def previous_token_score(pattern):
            rows = [pattern[..., t, t - 1] for t in range(1, pattern.shape[-1])]
            return torch.stack(rows).mean(dim=0)
    '''),
    right("previous_token_score", "shifted-identity", '''
        def previous_token_score(pattern):
            T = pattern.shape[-1]
            below = torch.diag(torch.ones(T - 1, dtype=pattern.dtype), -1)
            return (pattern * below).sum(dim=(-2, -1)) / (T - 1)
    '''),
    wrong("previous_token_score", "main-diagonal", "prev-score-self",
          prev("return pattern.diagonal(0, -2, -1).mean(-1)")),
    wrong("previous_token_score", "main-diagonal-from-1", "prev-score-self",
          prev("return pattern.diagonal(0, -2, -1)[..., 1:].mean(-1)")),
    wrong("previous_token_score", "divides-by-T", "score-counts-first-row",
          prev("return pattern.diagonal(-1, -2, -1).sum(-1) / pattern.size(-1)")),
    wrong("previous_token_score", "above-diagonal", "score-rows-columns-swapped",
          prev("return pattern.diagonal(1, -2, -1).mean(-1)")),
    wrong("previous_token_score", "transposed-index", "score-rows-columns-swapped", '''
        def previous_token_score(pattern):
            t = torch.arange(1, pattern.size(-1))
            return pattern[..., t - 1, t].mean(dim=-1)
    '''),
    wrong("previous_token_score", "stacked-then-mean-last", "score-mean-wrong-axis", '''
        def previous_token_score(pattern):
            rows = [pattern[..., t, t - 1] for t in range(1, pattern.shape[-1])]
            return torch.stack(rows).mean(dim=-1)
    '''),
    wrong("previous_token_score", "mean-over-first-axis", "score-mean-wrong-axis",
          prev("return pattern.diagonal(-1, -2, -1).mean(0)")),
    right("previous_token_score", "einsum-shifted-identity", '''
        def previous_token_score(pattern):
            T = pattern.size(-1)
            below = torch.diag(torch.ones(T - 1, dtype=pattern.dtype), -1)
            return torch.einsum("...ts,ts->...", pattern, below) / (T - 1)
    '''),
    right("previous_token_score", "loop-over-rows", '''
        def previous_token_score(pattern):
            T = pattern.shape[-1]
            total = torch.zeros(pattern.shape[:-2], dtype=pattern.dtype)
            for t in range(1, T):
                total += pattern[..., t, t - 1]
            return total / (T - 1)
    '''),
    right("previous_token_score", "gather", '''
        def previous_token_score(pattern):
            T = pattern.size(-1)
            cols = torch.arange(T - 1).view(T - 1, 1).expand(*pattern.shape[:-2], T - 1, 1)
            return pattern[..., 1:, :].gather(-1, cols).squeeze(-1).mean(-1)
    '''),
    right("previous_token_score", "flattened-lead", '''
        def previous_token_score(pattern):
            T = pattern.size(-1)
            flat = pattern.reshape(-1, T, T)
            scores = torch.stack([m.diagonal(-1).mean() for m in flat])
            return scores.reshape(pattern.shape[:-2])
    '''),
    wrong("previous_token_score", "sum-not-mean", "score-summed", prev("return pattern.diagonal(-1, -2, -1).sum(-1)")),
    wrong("previous_token_score", "stops-one-row-short", "prev-score-wrong-rows",
          prev("return pattern.diagonal(-1, -2, -1)[..., :-1].mean(-1)")),
    wrong("previous_token_score", "from-row-2", "prev-score-wrong-rows", '''
        def previous_token_score(pattern):
            t = torch.arange(2, pattern.size(-1))
            return pattern[..., t, t - 1].mean(dim=-1)
    '''),
    wrong("previous_token_score", "argmax-rows", "score-hard-attention", '''
        def previous_token_score(pattern):
            T = pattern.size(-1)
            looks_back = pattern.argmax(dim=-1)[..., 1:] == torch.arange(T - 1)
            return looks_back.float().mean(dim=-1)
    '''),
    # hard attention on the wrong cell: on the designed one-hot heads it gives what the main diagonal gives, on
    # every other input not; a diagnosis decided on the designed heads alone called it [prev-score-self]
    wrong("previous_token_score", "argmax-on-self", "wrong", '''
        def previous_token_score(pattern):
            T = pattern.size(-1)
            return (pattern.argmax(dim=-1) == torch.arange(T))[..., 1:].float().mean(dim=-1)
    '''),
    wrong("previous_token_score", "squeezed", "score-squeezed",
          prev("return pattern.squeeze().diagonal(-1, -2, -1).mean(-1)")),
    wrong("previous_token_score", "diagonal-default-dims", "score-diagonal-default-dims",
          prev("return torch.diagonal(pattern, -1).mean(-1)")),
    # --- induction_score ---
    right("induction_score", "advanced-index", induction("pattern[..., t, t - period + 1]")),
    right("induction_score", "diagonal-slice", '''
        def induction_score(pattern, period):
            return pattern.diagonal(-(period - 1), -2, -1)[..., 1:].mean(-1)
    '''),
    right("induction_score", "loop", '''
        def induction_score(pattern, period):
            T = pattern.shape[-1]
            total = 0
            for t in range(period, T):
                total = total + pattern[..., t, t - period + 1]
            return total / (T - period)
    '''),
    right("induction_score", "selection-mask", '''
        def induction_score(pattern, period):
            T = pattern.shape[-1]
            rows = torch.arange(T)[:, None]
            cols = torch.arange(T)[None, :]
            chosen = ((cols == rows - period + 1) & (rows >= period)).to(pattern.dtype)
            return (pattern * chosen).sum(dim=(-2, -1)) / (T - period)
    '''),
    wrong("induction_score", "previous-occurrence", "induction-off-by-one", induction("pattern[..., t, t - period]")),
    wrong("induction_score", "two-after", "induction-off-by-one", induction("pattern[..., t, t - period + 2]")),
    wrong("induction_score", "from-P-minus-1", "induction-wrong-range", '''
        def induction_score(pattern, period):
            return pattern.diagonal(-(period - 1), -2, -1).mean(-1)
    '''),
    wrong("induction_score", "divides-by-one-more", "induction-wrong-count", '''
        def induction_score(pattern, period):
            T = pattern.size(-1)
            t = torch.arange(period, T)
            return pattern[..., t, t - period + 1].sum(dim=-1) / (T - period + 1)
    '''),
    wrong("induction_score", "assumes-two-periods", "induction-wrong-range", '''
        def induction_score(pattern, period):
            t = torch.arange(period, 2 * period)
            t = t[t < pattern.size(-1)]
            return pattern[..., t, t - period + 1].mean(dim=-1)
    '''),
    right("induction_score", "einsum-selection", '''
        def induction_score(pattern, period):
            T = pattern.size(-1)
            t = torch.arange(T)
            chosen = ((t[None, :] == t[:, None] - period + 1) & (t[:, None] >= period)).to(pattern.dtype)
            return torch.einsum("...ts,ts->...", pattern, chosen) / (T - period)
    '''),
    right("induction_score", "gather", '''
        def induction_score(pattern, period):
            T = pattern.size(-1)
            cols = (torch.arange(period, T) - period + 1).view(-1, 1)
            rows = pattern[..., period:, :]
            return rows.gather(-1, cols.expand(*rows.shape[:-1], 1)).squeeze(-1).mean(-1)
    '''),
    wrong("induction_score", "divides-by-period", "induction-wrong-count", '''
        def induction_score(pattern, period):
            T = pattern.size(-1)
            t = torch.arange(period, T)
            return pattern[..., t, t - period + 1].sum(dim=-1) / period
    '''),
    wrong("induction_score", "divides-by-T", "induction-wrong-count", '''
        def induction_score(pattern, period):
            T = pattern.size(-1)
            t = torch.arange(period, T)
            return pattern[..., t, t - period + 1].sum(dim=-1) / T
    '''),
    wrong("induction_score", "stops-one-row-short", "induction-wrong-range", '''
        def induction_score(pattern, period):
            t = torch.arange(period, pattern.size(-1) - 1)
            return pattern[..., t, t - period + 1].mean(dim=-1)
    '''),
    wrong("induction_score", "from-P-plus-1", "induction-wrong-range", '''
        def induction_score(pattern, period):
            t = torch.arange(period + 1, pattern.size(-1))
            return pattern[..., t, t - period + 1].mean(dim=-1)
    '''),
    wrong("induction_score", "argmax-rows", "score-hard-attention", '''
        def induction_score(pattern, period):
            t = torch.arange(period, pattern.size(-1))
            return (pattern.argmax(dim=-1)[..., t] == t - period + 1).float().mean(dim=-1)
    '''),
    wrong("induction_score", "argmax-on-occurrence", "wrong", '''
        def induction_score(pattern, period):
            t = torch.arange(period, pattern.size(-1))
            return (pattern.argmax(dim=-1)[..., t] == t - period).float().mean(dim=-1)
    '''),
    wrong("induction_score", "sum-not-mean", "score-summed", '''
        def induction_score(pattern, period):
            t = torch.arange(period, pattern.size(-1))
            return pattern[..., t, t - period + 1].sum(dim=-1)
    '''),
    wrong("induction_score", "diagonal-default-dims", "score-diagonal-default-dims", '''
        def induction_score(pattern, period):
            return pattern.diagonal(-(period - 1))[..., 1:].mean(-1)
    '''),
    wrong("induction_score", "squeezed-first", "score-squeezed", '''
        def induction_score(pattern, period):
            pattern = pattern.squeeze(0)
            t = torch.arange(period, pattern.size(-1))
            return pattern[..., t, t - period + 1].mean(dim=-1)
    '''),
    wrong("induction_score", "above-diagonal", "score-rows-columns-swapped", '''
        def induction_score(pattern, period):
            return pattern.diagonal(period - 1, -2, -1).mean(-1)
    '''),
    wrong("induction_score", "stacked-then-mean-last", "score-mean-wrong-axis", '''
        def induction_score(pattern, period):
            rows = [pattern[..., t, t - period + 1] for t in range(period, pattern.size(-1))]
            return torch.stack(rows).mean(dim=-1)
    '''),
    # --- head_ablation_losses ---
    right("head_ablation_losses", "loop-mask", ablation()),
    right("head_ablation_losses", "eye-masks", '''
        def head_ablation_losses(model, tokens, period):
            L, H = model.config.n_layer, model.config.n_head
            masks = 1 - torch.eye(L * H).view(L * H, L, H)
            targets = tokens[:, period:]
            losses = []
            with torch.no_grad():
                for mask in masks:
                    logits = model(tokens, head_mask=mask)[0][:, period - 1:-1]
                    losses.append(F.cross_entropy(logits.transpose(1, 2), targets))
            return torch.stack(losses).view(L, H)
    '''),
    right("head_ablation_losses", "o-proj-pre-hook",
          hooked("model.blocks[layer].attn.o_proj", "..., head * Dh:(head + 1) * Dh", pre=True)),
    right("head_ablation_losses", "zeroed-columns-restored", '''
        def head_ablation_losses(model, tokens, period):
            cfg = model.config
            Dh = cfg.n_embed // cfg.n_head
            out = torch.zeros(cfg.n_layer, cfg.n_head)
            with torch.no_grad():
                for layer, block in enumerate(model.blocks):
                    weight = block.attn.o_proj.weight
                    saved = weight.clone()
                    for head in range(cfg.n_head):
                        weight[:, head * Dh:(head + 1) * Dh] = 0
                        logits, _ = model(tokens)
                        weight.copy_(saved)
                        per_token = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
                        out[layer, head] = per_token[:, period - 1:].mean()
            return out
    '''),
    right("head_ablation_losses", "fed-all-but-last", ablation(fed="tokens[:, :-1]", loss=(
        "F.nll_loss(F.log_softmax(logits[:, period - 1:], dim=-1).transpose(1, 2), tokens[:, period:])"))),
    right("head_ablation_losses", "hook-zeroes-values",
          hooked("model.blocks[layer].attn.v_proj", "..., head * Dh:(head + 1) * Dh")),
    wrong("head_ablation_losses", "model-loss", "ablation-wrong-positions", ablation(loss="loss")),
    wrong("head_ablation_losses", "first-half-targets", "ablation-wrong-positions", ablation(
        loss="F.cross_entropy(logits[:, :period - 1].reshape(-1, logits.size(-1)), tokens[:, 1:period].reshape(-1))")),
    wrong("head_ablation_losses", "softmax-before-cross-entropy", "ablation-softmax-before-ce", ablation(
        loss="F.cross_entropy(F.softmax(logits[:, period - 1:-1], dim=-1).reshape(-1, logits.size(-1)), "
             "tokens[:, period:].reshape(-1))")),
    wrong("head_ablation_losses", "fed-from-period-minus-1", "ablation-partial-input", ablation(
        fed="tokens[:, period - 1:]", loss="F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, period:])")),
    wrong("head_ablation_losses", "fed-repeat-only", "ablation-partial-input",
          ablation(fed="tokens[:, period:]", loss="loss")),
    wrong("head_ablation_losses", "hook-zeroes-queries", "ablation-zeroes-query",
          hooked("model.blocks[layer].attn.q_proj", "..., head * Dh:(head + 1) * Dh")),
    wrong("head_ablation_losses", "hook-zeroes-keys", "ablation-zeroes-query",
          hooked("model.blocks[layer].attn.k_proj", "..., head * Dh:(head + 1) * Dh")),
    wrong("head_ablation_losses", "pre-hook-zeroes-attention-input", "ablation-zeroes-input",
          hooked("model.blocks[layer].attn", "..., head * Dh:(head + 1) * Dh", pre=True)),
    wrong("head_ablation_losses", "pre-hook-first-sequence", "ablation-one-sequence",
          hooked("model.blocks[layer].attn.o_proj", "0, :, head * Dh:(head + 1) * Dh", pre=True)),
    wrong("head_ablation_losses", "skips-first-repeat", "ablation-wrong-positions", ablation(
        loss="F.cross_entropy(logits[:, period:-1].reshape(-1, logits.size(-1)), tokens[:, period + 1:].reshape(-1))")),
    wrong("head_ablation_losses", "not-shifted", "ablation-not-shifted", ablation(
        loss="F.cross_entropy(logits[:, period:].reshape(-1, logits.size(-1)), tokens[:, period:].reshape(-1))")),
    wrong("head_ablation_losses", "whole-layer", "ablation-whole-layer",
          ablation(mask="mask = torch.ones(L, H); mask[layer] = 0")),
    wrong("head_ablation_losses", "mask-inverted", "ablation-mask-inverted",
          ablation(mask="mask = torch.zeros(L, H); mask[layer, head] = 1")),
    wrong("head_ablation_losses", "hook-residual-channels", "ablation-zeroes-residual",
          hooked("model.blocks[layer]", "..., head * Dh:(head + 1) * Dh")),
    wrong("head_ablation_losses", "hook-whole-residual", "ablation-zeroes-residual",
          hooked("model.blocks[layer]", "...")),
    wrong("head_ablation_losses", "hook-after-o-proj", "ablation-after-projection",
          hooked("model.blocks[layer].attn", "..., head * Dh:(head + 1) * Dh")),
    wrong("head_ablation_losses", "mask-never-reset", "ablation-not-restored", '''
        def head_ablation_losses(model, tokens, period):
            L, H = model.config.n_layer, model.config.n_head
            out = torch.zeros(L, H)
            mask = torch.ones(L, H)
            with torch.no_grad():
                for layer in range(L):
                    for head in range(H):
                        mask[layer, head] = 0
                        logits, _ = model(tokens, head_mask=mask)
                        out[layer, head] = F.cross_entropy(logits[:, period - 1:-1].reshape(-1, logits.size(-1)),
                                                           tokens[:, period:].reshape(-1))
            return out
    '''),
    wrong("head_ablation_losses", "columns-never-restored", "ablation-not-restored", '''
        def head_ablation_losses(model, tokens, period):
            cfg = model.config
            Dh = cfg.n_embed // cfg.n_head
            out = torch.zeros(cfg.n_layer, cfg.n_head)
            with torch.no_grad():
                for layer, block in enumerate(model.blocks):
                    for head in range(cfg.n_head):
                        block.attn.o_proj.weight[:, head * Dh:(head + 1) * Dh] = 0
                        logits, _ = model(tokens)
                        out[layer, head] = F.cross_entropy(logits[:, period - 1:-1].reshape(-1, logits.size(-1)),
                                                           tokens[:, period:].reshape(-1))
            return out
    '''),
    wrong("head_ablation_losses", "transposed", "ablation-transposed", '''
        def head_ablation_losses(model, tokens, period):
            L, H = model.config.n_layer, model.config.n_head
            out = torch.zeros(H, L)
            with torch.no_grad():
                for layer in range(L):
                    for head in range(H):
                        mask = torch.ones(L, H)
                        mask[layer, head] = 0
                        logits, _ = model(tokens, head_mask=mask)
                        out[head, layer] = F.cross_entropy(logits[:, period - 1:-1].reshape(-1, logits.size(-1)),
                                                           tokens[:, period:].reshape(-1))
            return out
    '''),
    wrong("head_ablation_losses", "returns-increase", "ablation-returns-increase", ablation(loss=(
        f"{_REPEATED} - F.cross_entropy(model(tokens)[0][:, period - 1:-1].reshape(-1, logits.size(-1)), "
        "tokens[:, period:].reshape(-1))"))),
    wrong("head_ablation_losses", "last-hook-left", "ablation-model-changed", '''
        def head_ablation_losses(model, tokens, period):
            L, H = model.config.n_layer, model.config.n_head
            Dh = model.config.n_embed // H
            out = torch.zeros(L, H)
            handle = None
            for layer in range(L):
                for head in range(H):
                    def switch_off(module, args, head=head):
                        y = args[0].clone()
                        y[..., head * Dh:(head + 1) * Dh] = 0
                        return (y,)
                    if handle is not None:
                        handle.remove()
                    handle = model.blocks[layer].attn.o_proj.register_forward_pre_hook(switch_off)
                    with torch.no_grad():
                        logits, _ = model(tokens)
                    out[layer, head] = F.cross_entropy(logits[:, period - 1:-1].reshape(-1, logits.size(-1)),
                                                       tokens[:, period:].reshape(-1))
            return out
    '''),
    # --- quiz_induction_heads: the visible keys ---
    right("quiz_induction_heads", "formulas", quiz()),
    right("quiz_induction_heads", "rounded", quiz(a="14.0", b="0.29", e="3.912", f="0.326")),
    wrong("quiz_induction_heads", "previous-occurrence", "quiz-induction-off-by-one", quiz(a="13")),
    wrong("quiz_induction_heads", "previous-token", "quiz-induction-is-previous-token", quiz(a="22")),
    wrong("quiz_induction_heads", "first-row-counted", "quiz-score-first-row", quiz(b="1.45 / 6")),
    wrong("quiz_induction_heads", "uniform-over-all", "quiz-uniform-not-causal", quiz(b="1 / 6")),
    wrong("quiz_induction_heads", "layers-swapped", "quiz-heads-wrong-layer", quiz(c="1", d="0")),
    wrong("quiz_induction_heads", "both-in-layer-0", "quiz-induction-one-layer", quiz(d="0")),
    wrong("quiz_induction_heads", "layers-from-one", "quiz-layers-from-one", quiz(c="1", d="2")),
    wrong("quiz_induction_heads", "missing-key", "quiz-missing-key", '''
        def quiz_induction_heads():
            return {"induction_key": 14, "uniform_prev_score": 0.29}
    '''),
    wrong("quiz_induction_heads", "layer-as-string", "wrong-type", quiz(d='"1"')),
    # --- quiz_induction_heads: the keys only the hidden test judges ---
    fits_visible("quiz_induction_heads", "loss-in-bits", "quiz-loss-bits", quiz(e="math.log2(50)")),
    fits_visible("quiz_induction_heads", "loss-as-probability", "quiz-loss-is-probability", quiz(e="1 / 50")),
    fits_visible("quiz_induction_heads", "floor-zero", "quiz-floor-first-repeat", quiz(f="0")),
    fits_visible("quiz_induction_heads", "floor-whole-sequence", "quiz-floor-whole-sequence",
                 quiz(f="12 * math.log(50) / 23")),
    fits_visible("quiz_induction_heads", "floor-guessed", "wrong", quiz(f="0.1")),
]
