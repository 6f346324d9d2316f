"""bench_search_play's variants: each option sets its `Search` field, bad ones are refused."""

import pytest

from bench.bench_search_play import parse_variant, wilson
from hm.search import Search


def test_a_variant_sets_each_named_field_and_leaves_the_others_at_the_defaults():
    search, charge_undo = parse_variant("32:q=0.5:g=0:r=2:v=0.3:x=0.1:s=3:p=80:m=4:u=0")
    assert search == Search(num_simulations=32, q_span=0.5, gumbel_scale=0.0, root_searches=2, value_scale=0.3,
                            distance_weight=0.1, chance_samples=3, patience=80.0, max_num_considered_actions=4)
    assert charge_undo is False
    assert parse_variant("8") == (Search(num_simulations=8), True)


def test_zero_simulations_is_the_policy_alone():
    assert parse_variant("0") == (None, True)


def test_an_unknown_option_is_refused_naming_the_variant_and_the_options():
    with pytest.raises(SystemExit, match=r"--variants 8:k=2: unknown option 'k'; options are .*m=, u="):
        parse_variant("8:k=2")


def test_an_out_of_range_setting_is_refused_by_search():
    with pytest.raises(ValueError, match="max_num_considered_actions must be at least 1"):
        parse_variant("8:m=0")


def test_wilson_interval_brackets_the_rate():
    low, high = wilson(7, 512)
    assert 0.006 < low < 7 / 512 < high < 0.03
    assert wilson(0, 0) == (0.0, 1.0)
