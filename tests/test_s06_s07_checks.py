"""Sections 06 and 07: the checks judge the same way whatever seed the judge draws.

The judge (autograder/judge.py) gives every test cell a fresh seed below 2³¹. Two checks once went
wrong there and nowhere else: 07's repeat_kv check added its seed to its input values, which at
seed 2³¹ − 2 all rounded to the same float32 number, and the tiled repeat passed; 06's hidden
tiled_attention cases drew key lengths as short as 5, and at seeds such as 4522708 the search for a
full [Tq, Tk] tensor took q itself for one, failing every right answer. Here each of the two
sections' variants is judged at such seeds.
"""
from __future__ import annotations

import pytest

from .bugbank import all_variants, load
from .judging import judge_locally

SECTION_EXERCISES = {"attention_flops", "attention_weights_bytes", "quiz_complexity", "tiled_attention",
                     "repeat_kv", "KVCache", "GroupedQueryAttention", "kv_cache_bytes", "quiz_kv_cache"}
VARIANTS = [v for v in all_variants() if v.exercise in SECTION_EXERCISES]
# seeds as the judge draws them (below 2³¹); 4522708 and 815217484 are two that failed 06's right answers
SEEDS = {False: (2**31 - 2,), True: (2**31 - 1_000_003, 4522708, 815217484)}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_a_judge_seed_gives_the_same_diagnosis(variant):
    for extended, seed in ((extended, seed) for extended, seeds in SEEDS.items() for seed in seeds):
        expected = None if variant.fits_visible and not extended else variant.expected
        got = judge_locally(variant.exercise, load(variant), extended, seed)
        assert got == expected, f"{variant.id} (extended={extended}, seed={seed}): expected {expected}, got {got}"
