"""Section 12: the given attention-only model does what its contract says (head_mask, loss, patterns), the
attention microscope reads the attention a model really computes — on section 10's DecoderLM through its KV
cache and on section 12's model without one —, the checks never train a model, and the section's figures
read without colour and say their numbers."""
from __future__ import annotations

import contextlib
import io

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F

from utils import plotting, reference
from utils.demos import s11, s12
from utils.demos.s10 import init_like_llama
from utils.reference import DecoderLM, generate
from utils.reference.s10_decoder_only_model import ModelConfig
from utils.reference.s12_what_heads_learn import AttentionOnlyLM, attention_patterns, loss_by_position, repeated_tokens
from utils.checks import CheckError
from utils.widgets import attention_microscope, draw_microscope_step, trace_generation

from .test_plotting import look, run_cells

SMALL = ModelConfig(vocab_size=11, context_length=16, n_embed=16, n_head=2, n_kv_head=2, n_layer=2, ffn_hidden=0,
                    tie_embeddings=False)


def small_model(seed: int = 0, std: float = 0.5) -> AttentionOnlyLM:
    """An untrained AttentionOnlyLM with weights large enough that its heads attend unevenly."""
    torch.manual_seed(seed)
    return init_like_llama(AttentionOnlyLM(SMALL), std=std).eval()


def small_decoder(seed: int = 0) -> DecoderLM:
    """Section 10's DecoderLM with grouped K/V (4 query heads, 2 K/V heads) and Llama-like uneven weights."""
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=13, context_length=16, n_embed=16, n_head=4, n_kv_head=2, n_layer=2, ffn_hidden=24)
    return init_like_llama(DecoderLM(cfg), std=0.3).eval()


# --- the given model ------------------------------------------------------------------------------

@torch.no_grad()
def test_head_mask_zeroes_a_head_before_the_output_projection():
    model = small_model()
    tokens = repeated_tokens(3, 5, SMALL.vocab_size, torch.Generator().manual_seed(1))          # (3, 10)
    logits, loss = model(tokens)
    assert torch.equal(model(tokens, head_mask=torch.ones(SMALL.n_layer, SMALL.n_head))[0], logits)
    assert torch.allclose(loss, F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:]))
    mask = torch.ones(SMALL.n_layer, SMALL.n_head)
    mask[1, 0] = 0
    masked = model(tokens, head_mask=mask)[0]
    head_dim = SMALL.n_embed // SMALL.n_head
    model.blocks[1].attn.o_proj.weight[:, :head_dim] = 0                     # the head's columns of W_O
    assert torch.allclose(masked, model(tokens)[0], atol=1e-6)
    assert not torch.allclose(masked, logits, atol=1e-3), "switching the head off changed the logits"


def test_attention_patterns_are_causal_rows_and_leave_no_hook():
    model = small_model()
    tokens = repeated_tokens(2, 4, SMALL.vocab_size, torch.Generator().manual_seed(2))          # (2, 8)
    patterns = attention_patterns(model, tokens)
    assert patterns.shape == (SMALL.n_layer, 2, SMALL.n_head, 8, 8)
    assert torch.allclose(patterns.sum(-1), torch.ones(SMALL.n_layer, 2, SMALL.n_head, 8))
    assert not patterns.triu(diagonal=1).any()
    assert not any(block.attn._forward_hooks for block in model.blocks)
    assert loss_by_position(model, tokens).shape == (7,)


@torch.no_grad()
def test_it_is_section_10s_model_without_its_ffns():
    model = small_model()
    assert isinstance(model, DecoderLM) and model.config is SMALL
    names = {name for name, _ in model.named_parameters()}
    assert not any(".ffn." in name or ".norm2." in name for name in names), names
    tokens = torch.tensor([[1, 2, 3, 4]])
    x = model.tok_emb(tokens)
    block = model.blocks[0]
    angles = torch.randn(4, SMALL.n_embed // SMALL.n_head // 2)                  # (T, Dh/2)
    assert torch.equal(block(x, angles), x + block.attn(block.norm1(x), angles)), "x + attention, nothing more"
    assert not any(block.attn.o_proj._forward_pre_hooks for block in model.blocks)
    model(tokens, head_mask=torch.zeros(SMALL.n_layer, SMALL.n_head))
    assert not any(block.attn.o_proj._forward_pre_hooks for block in model.blocks), "the switches are taken off"


# --- the attention microscope ---------------------------------------------------------------------

def test_the_microscope_reads_the_attention_of_a_model_without_a_cache():
    model = small_model(seed=3)
    prompt = repeated_tokens(1, 4, SMALL.vocab_size, torch.Generator().manual_seed(3))[:, :5]   # (1, 5)
    steps = trace_generation(model, prompt, 4)
    for step in steps:
        full = attention_patterns(model, torch.tensor([step.tokens]))                          # (L, 1, H, S, S)
        for layer, rows in enumerate(step.rows):
            assert torch.allclose(rows, full[layer, 0, :, -1], atol=1e-5), (len(step.tokens), layer)
        assert step.cached == [len(step.tokens)] * SMALL.n_layer
    assert not any(block.attn._forward_hooks for block in model.blocks)


def test_the_microscope_reads_the_attention_of_a_decoder_through_its_cache():
    model = small_decoder()
    prompt = torch.tensor([[3, 1, 4]])
    steps = trace_generation(model, prompt, 5)
    assert [step.cached for step in steps] == [[n] * 2 for n in range(3, 8)], "the cache fills one position a step"
    for step in steps:
        maps = s11.attention_maps(model, torch.tensor([step.tokens]))                           # [(H, S, S)] × L
        for layer, rows in enumerate(step.rows):
            assert rows.shape == (4, len(step.tokens))
            assert torch.allclose(rows, maps[layer][:, -1], atol=1e-5), (len(step.tokens), layer)
    chosen = steps[-1].tokens[3:] + [steps[-1].chosen]
    assert chosen == generate(model, prompt, 5, temperature=0)[0, 3:].tolist(), "greedy, as section 10's generate"


def test_the_microscope_samples_with_its_generator_and_stops_at_the_context_length():
    model = small_decoder(seed=1)

    def drawn(seed):
        steps = trace_generation(model, torch.tensor([[2, 5]]), 6, temperature=1.0,
                                 generator=torch.Generator().manual_seed(seed))
        return [step.chosen for step in steps], steps

    first, steps = drawn(0)
    assert first == drawn(0)[0] and any(drawn(seed)[0] != first for seed in (1, 2, 3))
    assert all(abs(step.probs.sum().item() - 1) < 1e-5 for step in steps)
    assert len(trace_generation(model, torch.tensor([[2, 5]]), 40)) == 15, "positions 0 … 15 of a context of 16"


def test_the_microscope_figure_says_where_each_head_looks(capsys):
    plotting.setup_chinese_font()
    model = small_model(seed=4)
    step = trace_generation(model, torch.tensor([[1, 2, 3, 1]]), 1)[0]
    labels = [chr(ord("A") + v) for v in range(SMALL.vocab_size)]
    fig = draw_microscope_step(step, labels, SMALL.context_length, "显微镜")
    bars = fig.axes[len(step.rows)]                                   # the next token's distribution, under the maps
    hatched = [label.get_text() for bar, label in zip(bars.patches, bars.get_xticklabels()) if bar.get_hatch()]
    assert hatched == [labels[step.chosen]] and "带斜线" in bars.get_title(), "the chosen token is told without colour"
    plt.close(fig)
    printed = capsys.readouterr().out
    assert printed.startswith(plotting.TEXT_ALTERNATIVE)
    for layer, rows in enumerate(step.rows):
        for head, row in enumerate(rows):
            assert f"第 {layer} 层头 {head} 最看位置 {int(row.argmax())}" in printed
    assert f"抽中“{labels[step.chosen]}”" in printed


def test_at_grading_the_microscope_draws_nothing(monkeypatch, capsys):
    from utils import GRADING_BACKEND

    monkeypatch.setitem(matplotlib.rcParams, "backend", GRADING_BACKEND)
    steps = attention_microscope(small_model(), torch.tensor([[1, 2, 3]]), 2, [str(v) for v in range(11)])
    assert len(steps) == 2 and plotting.TEXT_ALTERNATIVE not in capsys.readouterr().out


MICROSCOPE_NOTEBOOK = [
    "import ipywidgets as widgets, torch\n"
    "from utils.plotting import setup_chinese_font\n"
    "from utils.reference.s10_decoder_only_model import ModelConfig\n"
    "from utils.reference.s12_what_heads_learn import AttentionOnlyLM\n"
    "from utils.widgets import attention_microscope\n"
    "setup_chinese_font()\n"
    "torch.manual_seed(0)\n"
    "model = AttentionOnlyLM(ModelConfig(vocab_size=5, context_length=8, n_embed=8, n_head=2, n_kv_head=2,\n"
    "                                    n_layer=1, ffn_hidden=0, tie_embeddings=False))\n"
    "steps = attention_microscope(model, torch.tensor([[0, 1, 2]]), 3, list('ABCDE'), start=0)",
    "import warnings\n"
    "with warnings.catch_warnings():   # the registry of live widgets: how a test finds the slider\n"
    "    warnings.simplefilter('ignore', DeprecationWarning)\n"
    "    slider = [w for w in widgets.Widget.widgets.values() if isinstance(w, widgets.IntSlider)][-1]\n"
    "slider.value = 2",
]


@pytest.mark.slow
def test_the_microscope_steps_in_place_in_a_notebook():
    """Moving the step slider redraws the one figure and its text above the controls (no second figure)."""
    nb = run_cells(MICROSCOPE_NOTEBOOK)
    shown, moved = nb.cells
    images = [o for o in shown.outputs if "image/png" in o.get("data", {})]
    texts = [o["data"]["text/plain"] for o in shown.outputs if set(o.get("data", {})) == {"text/plain"}]
    assert len(images) == 1 and moved.outputs == []
    assert len(texts) == 1 and "位置 4" in texts[0], "the text now describes step 2 (the query at position 4)"


# --- the checks never train -----------------------------------------------------------------------

def test_no_check_of_section_12_trains_a_model(monkeypatch):
    """A check that trained would call backward: here it would raise."""
    import utils.checks as checks
    from utils import reference

    def refuse(*_args, **_kwargs):
        raise AssertionError("a check trained a model")

    monkeypatch.setattr(torch.Tensor, "backward", refuse)
    monkeypatch.setattr(torch.autograd, "backward", refuse)
    for name in ("previous_token_score", "induction_score", "head_ablation_losses", "quiz_induction_heads"):
        for extended in (False, True):
            getattr(checks, f"check_{name}")(getattr(reference, name), extended=extended, seed=5)


# --- figures --------------------------------------------------------------------------------------

def test_the_figures_tell_their_series_apart_without_colour(capsys):
    plotting.setup_chinese_font()
    figures = [s12.plot_training([3.0, 2.5, 2.0, 1.5] * 10, torch.tensor([3.0, 3.1, 2.9, 1.0, 0.2]), 3, 3.0, "训练"),
               s12.plot_ablation(torch.tensor([[0.6, 2.8], [1.2, 2.3]]), {"不关": 0.56, "瞎猜": 3.0}, "消融")]
    for fig in figures:
        for ax in (ax for ax in fig.axes if ax.get_legend_handles_labels()[0]):
            handles, labels = ax.get_legend_handles_labels()
            looks = [look(h) for h in handles]
            assert all(looks.count(seen) == 1 for seen in looks), labels
        plt.close(fig)
    printed = capsys.readouterr().out
    assert "位置 1 到 2 平均 3.05，位置 3 到 5（重复部分）平均 1.37，其中位置 3 是 2.90" in printed
    assert "第 0 层头 1 2.80" in printed and "不关 0.56" in printed


def test_the_score_tables_say_every_number(capsys):
    plt.close(s12.plot_scores({"前一位置": torch.tensor([[0.34, 0.48], [0.06, 0.02]])}, "分数"))
    printed = capsys.readouterr().out
    assert all(f"{name} {value}" in printed for name, value in
               [("第 0 层头 0", "0.34"), ("第 0 层头 1", "0.48"), ("第 1 层头 0", "0.06"), ("第 1 层头 1", "0.02")])


# --- the ablation cases' reuse never hides an oracle call from a recording -------------------------

def test_a_recording_after_a_visible_check_still_stores_the_ablation_cases():
    """A check run keeps its ablation cases for reuse (they cost 30 ms each); `course.py build` records what
    the oracles return while the visible checks run. A case reused from an earlier run in the same process
    would call no oracle, and the class edition would miss its stored result ("check-data-missing")."""
    from utils import reference
    from utils.checks import check_head_ablation_losses, oracle

    def quietly():
        with contextlib.redirect_stdout(io.StringIO()):
            check_head_ablation_losses(reference.head_ablation_losses)

    quietly()   # the cases of seed 0, computed and kept
    with oracle.recording() as store:
        quietly()
    assert any(key.startswith("ablation_truth:") for key in store.get("s12", {}))


# --- what the checks say -----------------------------------------------------------------------------

def failure(check, candidate, hint: int = 3):
    with pytest.raises(CheckError) as caught:
        check(candidate, hint=hint)
    return caught.value


def test_hint_3_writes_out_the_small_pattern_and_what_it_should_give():
    """A score wrong in no known way: hint 3 shows the 4x4 pattern, its right score and the candidate's, and the
    pattern written there is the one the check handed over (pasted into Python, it gives those numbers)."""
    from utils.checks import check_previous_token_score
    from utils.checks.s12 import SHOWN, shown_text

    def odd(pattern):
        return pattern.diagonal(-1, -2, -1).amax(dim=-1)                  # the largest weight on t - 1, not the mean
    err = failure(check_previous_token_score, odd)
    assert err.code == "wrong" and "4×4 的小例子" in err.finding
    assert shown_text("previous_token_score") in err.step
    shown = eval(shown_text("previous_token_score").split(" = ", 1)[1])   # noqa: S307 (our own text)
    assert torch.equal(shown, torch.tensor(SHOWN["previous_token_score"]))
    assert f"应得 0 维张量 {shown.diagonal(-1).mean():.4f}" in err.step and f"给出 {odd(shown):.4f}" in err.step


def test_hint_3_rebuilds_the_ablation_input_it_speaks_of():
    """The ablation's hint 3 names ablation_input(i): it gives the model, tokens and period of that case, on which
    the reference's entry (0, 0) is the number hint 3 writes."""
    from utils.checks import check_head_ablation_losses
    from utils.checks.s12 import ablation_input

    def whole_sequence(model, tokens, _period):
        return reference.head_ablation_losses(model, tokens, 1)           # every target, not the repeated part
    err = failure(check_head_ablation_losses, whole_sequence)
    assert "ablation_input(0)" in err.step
    model, tokens, period = ablation_input(0)
    right = reference.head_ablation_losses(model, tokens, period)
    assert f"关掉第 0 层头 0 之后应为 {right[0, 0]:.4f}" in err.step
    with torch.no_grad():
        logits = model(tokens)[0]
    base = F.cross_entropy(logits[:, period - 1:-1].transpose(1, 2), tokens[:, period:])
    assert f"平均交叉熵是 {base:.4f}" in err.step


def test_an_untouched_stub_is_sent_to_its_own_exercise():
    from utils.checks import (check_head_ablation_losses, check_induction_score, check_previous_token_score,
                              check_quiz_induction_heads)

    def stub(*_args):
        raise NotImplementedError
    errors = [failure(check, stub) for check in (check_previous_token_score, check_induction_score,
                                                 check_head_ablation_losses, check_quiz_induction_heads)]
    assert {err.code for err in errors} == {"not-implemented"}
    hints = [tuple(err.hints()[1:]) for err in errors]
    assert len(set(hints)) == len(hints) and all(h[0].startswith("12 节") for h in hints), hints


@pytest.mark.parametrize(("layers", "code"), [((1, 2), "quiz-layers-from-one"), ((1, 0), "quiz-heads-wrong-layer"),
                                              ((0, 0), "quiz-induction-one-layer")])
def test_the_quiz_names_a_layer_mistake_without_saying_the_layers(layers, code):
    from utils.checks import check_quiz_induction_heads

    def answers():
        return {"induction_key": 14, "uniform_prev_score": sum(1 / (t + 1) for t in range(1, 6)) / 5,
                "previous_token_layer": layers[0], "induction_layer": layers[1], "first_half_loss": 3.9,
                "repeated_part_floor": 0.3}
    err = failure(check_quiz_induction_heads, answers)
    told = str(err)
    assert err.code == code
    said = ("在第 0 层", "在第 1 层", "第 1 层或更后面", "= 0、induction_layer = 1")
    assert not any(answer in told for answer in said), told
