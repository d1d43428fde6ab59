"""The cost formulas of 09 §8 count what attention really does: the KV cache holds the KV heads only,
and the score work (QKᵀ and AV) grows with the query heads, so GQA shrinks the cache, not the FLOPs.

The notebook's kv_bytes and score_flops are taken from the solution's cell and compared with a tiny
grouped-query attention measured by torch's FLOP counter and by the bytes of the tensors it caches."""
from __future__ import annotations

import ast

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from autograder.notebook_format import read

from .conftest import ROOT

NOTEBOOK = ROOT / "solutions" / "09_rope" / "09_rope.ipynb"
# A GQA config where the two head counts differ, so a formula using the wrong one cannot pass.
TINY = {"n_layer": 3, "n_head": 4, "n_kv_head": 2, "head_dim": 8}


def notebook_functions(*names: str) -> dict:
    """The functions ``names`` as the solution notebook defines them (their defs only, nothing else run)."""
    for cell in read(NOTEBOOK)["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse(cell["source"])
        defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
        if {d.name for d in defs} == set(names):
            namespace: dict = {}
            exec(compile(ast.Module(body=defs, type_ignores=[]), str(NOTEBOOK), "exec"), namespace)
            return {name: namespace[name] for name in names}
    raise AssertionError(f"no cell of {NOTEBOOK.name} defines {names}")


def gqa_attention(T: int, cfg: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's scores and output of a GQA head group: K, V cached per KV head, expanded to the query heads."""
    H, H_kv, Dh = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"]
    q = torch.randn(1, H, T, Dh)                                       # (B, H, T, Dh)
    k, v = torch.randn(1, H_kv, T, Dh), torch.randn(1, H_kv, T, Dh)    # (B, H_kv, T, Dh): what the cache holds
    k, v = (t.repeat_interleave(H // H_kv, dim=1) for t in (k, v))     # (B, H, T, Dh)
    weights = (q @ k.transpose(-2, -1)).softmax(-1)                    # (B, H, T, T)
    return weights, weights @ v


def measured_score_flops(T: int, cfg: dict) -> int:
    with FlopCounterMode(display=False) as counter:
        for _ in range(cfg["n_layer"]):
            gqa_attention(T, cfg)
    return counter.get_total_flops()


def measured_kv_bytes(T: int, cfg: dict) -> int:
    k = torch.zeros(1, cfg["n_kv_head"], T, cfg["head_dim"], dtype=torch.float16)   # one layer's cached K
    return cfg["n_layer"] * 2 * k.numel() * k.element_size()


def assert_counts_like_attention(score_flops, kv_bytes) -> None:
    for T in (5, 16):
        assert score_flops(T, TINY) == measured_score_flops(T, TINY), f"score_flops(T={T}) ≠ measured"
        assert kv_bytes(T, TINY) == measured_kv_bytes(T, TINY), f"kv_bytes(T={T}) ≠ the cached tensors' bytes"


def test_notebook_cost_formulas_match_a_measured_gqa_layer():
    functions = notebook_functions("kv_bytes", "score_flops")
    assert_counts_like_attention(functions["score_flops"], functions["kv_bytes"])


@pytest.mark.parametrize("defect", ["flops-per-kv-head", "cache-per-query-head"])
def test_the_measurement_rejects_the_wrong_head_count(defect):
    """The defect this test exists for: counting the score work per KV head (or the cache per query head)."""
    def flops_per_kv_head(T, cfg):
        return 4 * cfg["n_layer"] * cfg["n_kv_head"] * T * T * cfg["head_dim"]

    def cache_per_query_head(T, cfg, bytes_per_elem=2):
        return 2 * cfg["n_layer"] * cfg["n_head"] * cfg["head_dim"] * T * bytes_per_elem

    right = notebook_functions("kv_bytes", "score_flops")
    wrong = ((flops_per_kv_head, right["kv_bytes"]) if defect == "flops-per-kv-head"
             else (right["score_flops"], cache_per_query_head))
    with pytest.raises(AssertionError):
        assert_counts_like_attention(*wrong)
