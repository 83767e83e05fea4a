"""The packet schema: any received value becomes a typed group or a counted reason, never an
exception, and the env keeps stepping whatever a hostile sender puts on the wire."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sapo_env
from sapo_env.defenses import transport_attacks
from sapo_env.defenses.packet_schema import GROUP_FIELDS, admit, parse_packet
from sapo_env.runtime.pool_dataset import packet_row, to_dataset

L = 8


def answering_1(observations, num_external):
    """Every node answers "1" to every question, L times, and asks for ``num_external``."""
    return {a: {"completions": [["<answer>1</answer>"] * L] * len(o["questions"]),
                "num_external": num_external} for a, o in observations.items()}


@pytest.fixture(scope="module")
def honest_group():
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    observations, _ = env.reset(seed=0)
    actions = answering_1(observations, num_external=0)
    observations, *_ = env.step(actions)
    return dict(observations["node_0"]["pool"][0])


def _parse(value, round_=5):
    return parse_packet(value, round_, L, 16384)


def test_an_honest_group_passes_as_a_fresh_typed_copy_stamped_with_the_arrival_round(
        honest_group):
    parsed = _parse(honest_group, round_=7)
    assert isinstance(parsed, dict) and set(parsed) == GROUP_FIELDS
    assert parsed["round"] == 7  # the receiver's clock, not the sender's
    assert parsed["completions"] == tuple(honest_group["completions"])
    assert parsed["rewards"].dtype == np.float32 and not parsed["rewards"].flags.writeable
    assert np.array_equal(parsed["rewards"], honest_group["rewards"])
    assert parsed["ref"] == honest_group["ref"] and parsed["ref"] is not honest_group["ref"]


class _LyingStr(str):
    def __len__(self):
        return 1


class _LyingArray(np.ndarray):
    """An array that claims to be 1-d and L long, whatever its shape."""

    @property
    def ndim(self):
        return 1

    def __len__(self):
        return L


class _LyingInt(np.int64):
    """An integer that passes any bound and turns into 2**70."""

    def __ge__(self, other):
        return True

    def __le__(self, other):
        return True

    def __lt__(self, other):
        return True

    def __int__(self):
        return 2**70


def _lying(*shape):
    return np.zeros(shape, np.float32).view(_LyingArray)


@pytest.mark.parametrize("field, value, reason", [
    ("round", "7", None),  # any claimed round is replaced, so a string does no harm
    ("round", None, None),
    ("round", 10**9, None),
    ("rewards", [1.0] * L, None),  # a list of floats is fine
    ("rewards", [float("nan")] * L, "malformed"),
    ("rewards", [float("inf")] * L, "malformed"),
    ("rewards", ["1"] * L, "malformed"),
    ("rewards", [True] * L, "malformed"),
    ("rewards", np.float32(1.0), "malformed"),  # 0-d
    ("rewards", np.ones((2, 4), np.float32), "malformed"),
    ("rewards", np.ones(L - 1, np.float32), "malformed"),
    ("rewards", _lying(L, 3), "malformed"),  # an ndarray subclass is not an ndarray
    ("advantages", _lying(L, L), "malformed"),
    ("logprobs", [_lying(4, 2)] * L, "malformed"),
    ("logprobs", [np.zeros(4, np.float32)] * L, None),
    ("advantages", "01234567", "malformed"),
    ("source", ["node_0"], "malformed"),
    ("source", _LyingStr("node_0"), "malformed"),  # a str subclass is not a str
    ("question", np.array(["q"]), "malformed"),
    ("answer", np.array("42"), "malformed"),
    ("task", None, "malformed"),
    ("system_prompt", 3, "malformed"),
    ("completions", "x" * L, "malformed"),
    ("completions", ("x",) * (L + 1), "malformed"),
    ("completions", ("x" * 16385,) + ("x",) * (L - 1), "oversized"),
    ("completions", (_LyingStr("x" * 10**6),) + ("x",) * (L - 1), "malformed"),
    ("completions", np.array(["x"] * L), "malformed"),
    ("question", "q" * (1 << 17), "oversized"),
    ("ref", [], "malformed"),
    ("ref", {"task": "t", "config": {}, "seed": -1, "index": 0}, "malformed"),
    ("ref", {"task": "t", "config": {}, "seed": 0, "index": 1.0}, "malformed"),
    ("ref", {"task": "t", "config": {"x": float("nan")}, "seed": 0, "index": 0}, "malformed"),
    ("ref", {"task": "t", "config": {"x": object()}, "seed": 0, "index": 0}, "malformed"),
    ("ref", {"task": "t", "config": {}, "seed": 0}, "malformed"),
    ("ref", {"task": "t", "config": {}, "seed": _LyingInt(0), "index": 0}, "malformed"),
    ("ref", {"task": "t", "config": {}, "seed": np.int64(3), "index": 0}, None),
])
def test_every_field_is_checked_for_type_and_size(honest_group, field, value, reason):
    parsed = _parse({**honest_group, field: value})
    if reason is None:
        assert isinstance(parsed, dict)
    else:
        assert parsed == reason


@pytest.mark.parametrize("value", [None, 3, "group", [], {"id": "x"}, object()])
def test_values_that_are_not_groups_are_malformed(value):
    assert _parse(value) == "malformed"


def test_extra_or_missing_fields_are_malformed(honest_group):
    assert _parse({**honest_group, "local": True}) == "malformed"
    assert _parse({k: v for k, v in honest_group.items() if k != "answer"}) == "malformed"


class _Exploding(dict):
    def __getitem__(self, key):
        raise RuntimeError("boom")


def test_a_mapping_that_raises_is_rejected_not_raised(honest_group):
    assert _parse(_Exploding(honest_group)) == "malformed"
    admitted, rejected = admit([("node_3", _Exploding(honest_group))], [], 0,
                               sapo_env.SwarmConfig())
    assert admitted == [] and rejected == {"node_3": 1}  # its sender, whatever it claims


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=9) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(sorted(GROUP_FIELDS)), value=_values)
def test_any_value_in_any_field_gives_a_group_or_a_reason(honest_group, field, value):
    parsed = _parse({**honest_group, field: value})
    assert parsed in ("malformed", "oversized") or set(parsed) == GROUP_FIELDS


@pytest.mark.parametrize("forge, harmless", [
    (lambda g: {**g, "round": "soon"}, True),  # restamped: the group itself is true
    (lambda g: {**g, "round": None}, True),
    (lambda g: {**g, "round": 10**9}, True),
    (lambda g: {**g, "rewards": list(map(str, g["rewards"]))}, False),
    (lambda g: {**g, "source": [g["source"]]}, False),
    (lambda g: {**g, "question": np.array([g["question"]])}, False),
    (lambda g: {**g, "completions": ("x" * 10**7,) + g["completions"][1:]}, False),
    (lambda g: "not a group", False),
])
def test_a_forged_packet_never_stops_the_run(monkeypatch, forge, harmless):
    """One hostile sender, every round, through the env's own hostile-machine hook: the
    round goes on, the packet is counted (or, forged only in its round, restamped and
    accepted), and later rounds still step."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards",
                        lambda group, extract, eps: [forge(group)])
    env = sapo_env.parallel_env(n=3, max_rounds=4, adversaries={"node_2": "forge_rewards"})
    observations, _ = env.reset(seed=1)
    for round_ in range(4):
        actions = answering_1(observations, num_external=2)
        observations, rewards, _, _, infos = env.step(actions)
        assert set(rewards) == {"node_0", "node_1", "node_2"}
        from_attacker = [g for g in observations["node_0"]["pool"] if g["source"] == "node_2"]
        if harmless:
            assert infos["node_0"]["rejected_groups_swarm"] == 0
            assert from_attacker and all(g["round"] == round_ for g in from_attacker)
        else:
            assert infos["node_0"]["rejected_groups_swarm"] >= 1 and from_attacker == []


# --- packets bound to what their sender was dealt --------------------------------------------

def _run_with_attacker(monkeypatch, forge, rounds=3, n=4):
    """node_3 sends ``forge(group)`` for each group it publishes; per round, the pool node_0
    saw, the infos, and how many groups node_3 published."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards",
                        lambda group, extract, eps: forge(group))
    env = sapo_env.parallel_env(n=n, max_rounds=rounds, adversaries={"node_3": "forge_rewards"})
    observations, _ = env.reset(seed=2)
    seen = []
    for _ in range(rounds):
        actions = answering_1(observations, num_external=2)
        sent = len(observations["node_3"]["questions"])  # one group per question it answers
        observations, _, _, _, infos = env.step(actions)
        seen.append((observations["node_0"]["pool"], infos, sent))
    return seen


def test_a_replay_of_other_nodes_groups_under_the_senders_name_is_rejected(monkeypatch):
    """node_3 republishes, as its own, node_1's groups of the round before (as it saw them
    in its pool): none reaches the pool, each is counted against node_3."""
    stolen: list = []

    def replay(group, extract, eps):
        return [group] + [{**g, "source": "node_3", "id": f"node_3/copy/{k}"}
                          for k, g in enumerate(stolen)]

    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards", replay)
    env = sapo_env.parallel_env(n=4, max_rounds=3, adversaries={"node_3": "forge_rewards"})
    observations, _ = env.reset(seed=2)
    for _ in range(3):
        actions = answering_1(observations, num_external=2)
        # each group node_3 publishes is followed by the copies
        replayed = len(observations["node_3"]["questions"]) * len(stolen)
        observations, _, _, _, infos = env.step(actions)
        assert not any("/copy/" in g["id"] for g in observations["node_0"]["pool"])
        assert infos["node_3"]["rejected_groups"] == replayed
        stolen[:] = [g for g in observations["node_3"]["pool"] if g["source"] == "node_1"]
    assert replayed > 0


@pytest.mark.parametrize("change", [
    {"source": "node_99"},  # a sybil: a name that was dealt nothing
    {"ref_index": 12345},  # a question the sender chose
    {"ref_seed": 2**61 + 5},  # e.g. a held-out block: never dealt for training
])
def test_a_packet_for_a_question_its_sender_was_not_dealt_is_rejected(monkeypatch, change):
    def forge(group):
        g = dict(group)
        ref = dict(g["ref"])
        if "ref_index" in change:
            ref["index"] = change["ref_index"]
        if "ref_seed" in change:
            ref["seed"] = change["ref_seed"]
        g["ref"] = ref
        g.update({k: v for k, v in change.items() if not k.startswith("ref_")})
        return [group, g]

    for pool, infos, sent in _run_with_attacker(monkeypatch, forge):
        assert infos["node_0"]["rejected_groups_swarm"] == sent  # every forged one, no other
        assert all(g["source"] in ("node_0", "node_1", "node_2", "node_3") for g in pool)
        assert all(g["ref"]["index"] != 12345 and g["ref"]["seed"] != 2**61 + 5 for g in pool)


def test_the_verifier_names_the_reason():
    from sapo_env.defenses.packets import PacketVerifier

    env = sapo_env.parallel_env(n=2, max_rounds=2)
    observations, _ = env.reset(seed=0)
    actions = answering_1(observations, num_external=0)
    dealt = {a: [q["ref"] for q in o["questions"]] for a, o in observations.items()}
    observations, *_ = env.step(actions)
    group = observations["node_0"]["pool"][0]
    stolen = {**group, "source": "node_1" if group["source"] == "node_0" else "node_0"}
    accepted, rejected = PacketVerifier(env.config).screen([stolen], dealt=dealt)
    assert accepted == [] and rejected == {stolen["source"]: 1}
    assert PacketVerifier(env.config).screen([group], dealt=dealt)[0] == [group]


def test_a_replay_of_a_senders_own_group_across_the_pool_window_boundary(monkeypatch):
    """With ``pool_window=2`` node_2's group of round 0 stays in the pool in round 1 and leaves
    it in round 2. node_2 sends an exact copy of it (a fresh id) in round 1 and in round 2. As
    the verifier's docs say: in round 1 the original is still in the pool, so the copy is a
    ``duplicate`` (the verifier is shown the pool as it stands this round); in round 2 it has
    just left, so the copy is no duplicate any more and what stops it is ``not_dealt`` (node_2
    was not dealt that question this round). Rejected and counted both times, never pooled."""
    from sapo_env.defenses.packets import PacketVerifier, question_key

    kept, sent_in = [], set()

    def replay_own(group):
        if group["round"] == 0 and not kept:
            kept.append(group)
        if group["round"] in (1, 2) and group["round"] not in sent_in:
            sent_in.add(group["round"])
            return [group, {**kept[0], "id": f"node_2/replay/r{group['round']}"}]
        return [group]

    verdicts, shown = PacketVerifier.verdicts, []  # what the env's publication asks

    def spy(self, groups, trusted=(), already=(), dealt=None, **charged):
        shown.append(list(already))
        return verdicts(self, groups, trusted, already, dealt, **charged)

    monkeypatch.setattr(PacketVerifier, "verdicts", spy)
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards",
                        lambda group, extract, eps: replay_own(group))
    env = sapo_env.parallel_env(n=3, max_rounds=3, pool_window=2,
                                adversaries={"node_2": "forge_rewards"})
    observations, _ = env.reset(seed=3)
    pools, rejected = [], []
    for _ in range(3):
        observations, _, _, _, infos = env.step(answering_1(observations, num_external=2))
        pools.append(observations["node_0"]["pool"])
        rejected.append(infos["node_2"]["rejected_groups"])
    original, key = kept[0], question_key(kept[0])
    assert [original["id"] in [g["id"] for g in pool] for pool in pools] == [True, True, False]
    assert [key in {question_key(g) for g in already} for already in shown] \
        == [False, True, False]
    assert rejected == [0, 1, 1] and sent_in == {1, 2}
    assert not any("/replay/" in g["id"] for pool in pools for g in pool)
    # what stops each copy: in round 1 the pool alone (a duplicate, whatever was dealt); in
    # round 2 nothing but what node_2 was dealt, since the copy is a genuine group
    copy = {**original, "id": "node_2/replay/again"}
    verifier = PacketVerifier(env.config)
    assert verifier.screen([copy], already=shown[1])[0] == []
    assert verifier.screen([copy], already=shown[2])[0] == [copy]


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("field, lie", [
    ("rewards", lambda g: _lying(L, 3)),
    ("advantages", lambda g: _lying(L, 2)),
    ("logprobs", lambda g: [_lying(4, 2)] * L),
])
def test_an_array_that_lies_about_its_shape_is_refused_and_recorded_as_plain_data(
        monkeypatch, verify, field, lie):
    """node_2 sends, in place of each of its groups, the group with one field an ndarray
    subclass that claims to be 1-d and L long but is 2-d: each packet is refused as
    ``malformed`` and counted against node_2, every round steps, the pool and the packets'
    fates hold only exact 1-d arrays (a refused packet's fate keeps no group, or one without
    the field that lied), and every fate becomes a row of the pool dataset."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards",
                        lambda group, extract, eps: [{**group, field: lie(group)}])
    env = sapo_env.parallel_env(n=3, max_rounds=2, verify_packets=verify,
                                adversaries={"node_2": "forge_rewards"})
    observations, _ = env.reset(seed=0)
    rows = []
    for round_ in range(2):
        sent = len(observations["node_2"]["questions"])
        observations, _, _, _, infos = env.step(answering_1(observations, num_external=2))
        assert infos["node_2"]["rejected_groups"] == infos["node_0"]["rejected_groups_swarm"] \
            == sent > 0
        lied = [p for p in env.last_packets if p.sender == "node_2"]
        assert {p.status for p in lied} == {"malformed"}
        assert all(type(p.raw) is str if p.group is None else field not in p.group
                   for p in lied)
        assert not any(g["source"] == "node_2" for g in observations["node_0"]["pool"])
        for g in [*observations["node_0"]["pool"], *(p.group for p in env.last_packets)]:
            arrays = [] if g is None else [g["rewards"], g["advantages"],
                                           *g.get("logprobs", ())]
            assert all(type(a) is np.ndarray and a.ndim == 1 for a in arrays)
        rows += [packet_row(round_, fate) for fate in env.last_packets]
    pytest.importorskip("datasets")
    assert to_dataset(rows).num_rows == len(rows)
