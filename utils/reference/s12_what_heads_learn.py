# Generated from solutions/12_what_heads_learn/12_what_heads_learn.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 12_what_heads_learn (the solution cells of its notebook)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['previous_token_score', 'induction_score', 'head_ablation_losses', 'quiz_induction_heads']


from dataclasses import replace

from utils.attention_hooks import attention_weights, watching_attention
from utils.demos.s10 import init_like_llama
from .s10_decoder_only_model import DecoderLM  # section 10
from .s09_rope import apply_rope  # section 09


class NoFFN(nn.Module):
    """Stands where a block's SwiGLU was: it adds nothing to the residual stream."""

    def forward(self, x):
        return torch.zeros_like(x)                                 # (B, T, C)


class AttentionOnlyLM(DecoderLM):
    """Section 10's DecoderLM without its FFNs, whose heads can be switched off one by one.

    config: section 10's ModelConfig with n_kv_head = n_head (every head its own K and V) and no tying; its
    ffn_hidden is not used. forward(tokens, head_mask=None): tokens (B, T) -> (logits (B, T, V), loss), loss
    the mean next-token cross-entropy of the sequence (the logits at t predict tokens[:, t + 1]); head_mask
    (n_layer, n_head): 1 keeps a head, 0 zeroes its output before the output projection.
    """

    def __init__(self, config):
        super().__init__(replace(config, ffn_hidden=1))            # 10's model; its SwiGLUs go below
        self.config = config
        for block in self.blocks:
            block.norm2, block.ffn = nn.Identity(), NoFFN()         # x + ffn(norm2(x)) now adds nothing
        init_like_llama(self)                                       # weights ~ N(0, 0.02²): near-uniform at first

    def forward(self, tokens, head_mask=None):
        switches = [] if head_mask is None else [
            block.attn.o_proj.register_forward_pre_hook(keep_heads(head_mask[i])) for i, block in enumerate(self.blocks)]
        try:
            logits, _ = super().forward(tokens)                     # (B, T, V)
        finally:
            for switch in switches:
                switch.remove()
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])   # the logits at t predict t + 1
        return logits, loss


def keep_heads(keep):
    """A forward pre-hook for o_proj, whose input (B, T, H·Dh) is every head's output side by side: head h's
    output is multiplied by keep[h]."""
    def hook(_module, args):
        heads = args[0].unflatten(-1, (keep.numel(), -1))          # (B, T, H, Dh)
        return ((heads * keep.to(heads.dtype)[:, None]).flatten(-2),)   # (B, T, H·Dh)
    return hook


def repeated_tokens(batch, period, vocab_size, generator, length=None):
    """(batch, length) random tokens that repeat with `period` (token t = token t - period); length 2·period."""
    first = torch.randint(vocab_size, (batch, period), generator=generator)          # (batch, P)
    length = length or 2 * period
    return first.repeat(1, -(-length // period))[:, :length]                         # (batch, length)


def train_heads_model(config, steps, seed, batch=128, lr=5e-3, periods=(6, 14), warmup=30):
    """An AttentionOnlyLM trained with AdamW on repeated random sequences, their period drawn per batch from
    `periods` (inclusive), on its own loss (every next token). Returns (the model, the loss of every step)."""
    torch.manual_seed(seed)
    model = AttentionOnlyLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup)                          # linear warm-up, then constant
        period = int(torch.randint(periods[0], periods[1] + 1, (1,), generator=g))
        _, loss = model(repeated_tokens(batch, period, config.vocab_size, g))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model.eval(), losses


@torch.no_grad()
def attention_patterns(model, tokens, head_mask=None):
    """(n_layer, B, H, T, T): every head's attention weights on tokens (B, T), recomputed from what each layer's
    attention was given (utils/attention_hooks.py: forward hooks on blocks[i].attn, then its own q_proj, k_proj
    and section 09's RoPE)."""
    with watching_attention(model) as seen:
        model(tokens, head_mask=head_mask)
    return torch.stack([attention_weights(block.attn, *seen[i][:2], apply_rope)
                        for i, block in enumerate(model.blocks)])


@torch.no_grad()
def loss_by_position(model, tokens):
    """(T - 1,): the cross-entropy of predicting each token from the ones before it, averaged over the batch;
    entry j - 1 is the loss of predicting tokens[:, j]."""
    logits, _ = model(tokens)                                                          # (B, T, V)
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none").mean(0)


def previous_token_score(pattern):
    """Attention weights pattern (..., T, T), rows = queries -> (...): for each [T, T], the mean over the
    rows t = 1 … T-1 of the weight on column t - 1."""
    on_previous = pattern.diagonal(offset=-1, dim1=-2, dim2=-1)    # (..., T-1): row t's weight on t - 1
    return on_previous.mean(dim=-1)                               # (...)


def induction_score(pattern, period):
    """Attention weights pattern (..., T, T) of a sequence that repeats with `period` -> (...): for each
    [T, T], the mean over the rows t = period … T-1 of the weight on column t - period + 1."""
    T = pattern.size(-1)
    rows = torch.arange(period, T)                                # (T - P,): queries whose token occurred before
    return pattern[..., rows, rows - period + 1].mean(dim=-1)     # (...): weight on the token after that occurrence


def head_ablation_losses(model, tokens, period):
    """The section's AttentionOnlyLM and tokens (B, T) that repeat with `period` -> (n_layer, n_head): the mean
    next-token cross-entropy on the targets at positions >= period, with that one head switched off."""
    n_layer, n_head = model.config.n_layer, model.config.n_head
    losses = torch.empty(n_layer, n_head)
    targets = tokens[:, period:]                                     # (B, T - P): positions >= period
    with torch.no_grad():
        for layer, head in [(i, j) for i in range(n_layer) for j in range(n_head)]:
            mask = torch.ones(n_layer, n_head)
            mask[layer, head] = 0.0                                  # this head's output only
            logits, _ = model(tokens, head_mask=mask)                # (B, T, V)
            predicting = logits[:, period - 1:-1]                    # (B, T - P, V): the logits at t predict t + 1
            losses[layer, head] = F.cross_entropy(predicting.reshape(-1, predicting.size(-1)), targets.reshape(-1))
    return losses


def quiz_induction_heads():
    """Six numbers (see the questions above):
    "induction_key", "uniform_prev_score", "previous_token_layer", "induction_layer" (judged by the visible check),
    "first_half_loss", "repeated_part_floor" (judged only by the hidden test).
    """
    return {
        "induction_key": 23 - 10 + 1,                                 # the position after x_23's previous occurrence
        "uniform_prev_score": sum(1 / (t + 1) for t in range(1, 6)) / 5,   # row t: 1/(t+1) on t - 1; rows 1 … 5
        "previous_token_layer": 0,
        "induction_layer": 1,                                         # its keys need layer 0's work (K-composition)
        "first_half_loss": math.log(50),                              # uniform over 50 tokens
        "repeated_part_floor": math.log(50) / 12,                     # 12 targets; only the first is a guess
    }
