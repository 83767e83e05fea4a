import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sapo_env.sampling import (
    FILTERS,
    assemble_batch,
    keep_all,
    keep_flags,
    keep_informative,
    sample_uniform,
)


def group(source, k, rewards=(1.0, 0.0)):
    return {"id": f"{source}/r0/q{k}", "source": source, "round": 0,
            "rewards": np.array(rewards, dtype=np.float32)}


def test_keep_flags_are_the_filter_of_each_group():
    rows = [(1.0, 0.0), (0.0, 0.0), (0.25, 0.25), (0.5, 1.0), (np.nan, np.nan), (1.0, np.nan)]
    groups = [group("a", k, r) for k, r in enumerate(rows)]
    assert keep_flags(keep_informative, groups) == [keep_informative(g) for g in groups] == [
        True, False, False, True, True, True]
    mixed = groups + [group("a", 9, (1.0, 1.0, 1.0))]  # not stackable: one call a group
    assert keep_flags(keep_informative, mixed) == [keep_informative(g) for g in mixed]
    seen = []
    assert keep_flags(lambda g: seen.append(g["id"]) or g["id"].endswith("1"), groups) == [
        False, True, False, False, False, False]
    assert seen == [g["id"] for g in groups]  # a custom filter: once a group, in order


def test_filters():
    assert FILTERS == {"zero_advantage": keep_informative, "none": keep_all}
    assert keep_informative(group("a", 0, (1.0, 0.0)))
    assert not keep_informative(group("a", 0, (0.0, 0.0)))
    assert not keep_informative(group("a", 0, (0.25, 0.25)))  # equal partial credit
    assert keep_all(group("a", 0, (0.0, 0.0)))


@given(st.integers(0, 20), st.integers(0, 25), st.integers(0, 2**32 - 1))
def test_uniform_is_without_replacement(n, k, seed):
    candidates = [group("b", i) for i in range(n)]
    chosen = sample_uniform(candidates, k, np.random.default_rng(seed))
    assert len(chosen) == min(n, k)
    assert len({id(g) for g in chosen}) == len(chosen)
    assert all(any(g is c for c in candidates) for g in chosen)


def test_uniform_covers_all_candidates():
    candidates = [group("b", i) for i in range(6)]
    rng = np.random.default_rng(0)
    seen = {g["id"] for _ in range(200) for g in sample_uniform(candidates, 2, rng)}
    assert len(seen) == 6


def test_assemble_marks_local_and_external():
    own = [group("a", k) for k in range(4)]
    others = [group("b", k) for k in range(4)]
    out = assemble_batch("a", own, others, 2, 3, np.random.default_rng(0))
    assert [g["local"] for g in out.batch] == [True, True, False, False, False]
    assert all(g["source"] == "a" for g in out.batch[:2])
    assert all(g["source"] == "b" for g in out.batch[2:])
    assert (out.num_local, out.num_external, out.local_shortfall, out.external_shortfall) == (
        2, 3, 0, 0)
    assert "local" not in own[0]  # batch entries are copies


def test_assemble_reports_shortfall_and_never_pads():
    own = [group("a", k) for k in range(2)]
    others = [group("b", 0)]
    out = assemble_batch("a", own, others, 4, 3, np.random.default_rng(0))
    assert len(out.batch) == 3
    assert (out.local_shortfall, out.external_shortfall) == (2, 2)


def test_custom_sampler_is_used_and_checked():
    others = [group("b", k, (k / 10, 0.0)) for k in range(5)]

    def best_first(candidates, k, rng):
        return sorted(candidates, key=lambda g: -g["rewards"][0])[:k]

    out = assemble_batch("a", [], others, 0, 2, np.random.default_rng(0), best_first)
    assert [g["id"] for g in out.batch] == ["b/r0/q4", "b/r0/q3"]

    with pytest.raises(ValueError, match="at most 2"):
        assemble_batch("a", [], others, 0, 2, np.random.default_rng(0),
                       lambda c, k, rng: list(c))
    with pytest.raises(ValueError, match="distinct"):
        assemble_batch("a", [], others, 0, 2, np.random.default_rng(0),
                       lambda c, k, rng: [c[0], c[0]])
    with pytest.raises(ValueError, match="distinct"):
        assemble_batch("a", [], others, 0, 1, np.random.default_rng(0),
                       lambda c, k, rng: [group("z", 9)])
