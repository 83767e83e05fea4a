"""Nodes in Ray actors: ``remote(factory, num_cpus=1, num_gpus=0)`` builds ``factory()`` inside
its own Ray actor (its own process, on any machine of the cluster) and returns a local handle
that is an agent like any other. The env stays in the driver; ``sapo_env.runtime.run`` starts every
remote node's ``act`` (then ``learn``) before it waits for any, so the nodes work at the same
time. A round is synchronous: the run is exactly the in-process run for the same seed, since
each node computes what it would compute at home (``tests/test_remote.py`` checks it).

Use::

    import ray
    from agents.wrappers.remote import remote_swarm
    from agents.sim.simulated import SimulatedLearner

    ray.init()                          # or ray.init(address="auto") on a cluster
    nodes = remote_swarm({a: partial(SimulatedLearner, seed=i) ...}, num_cpus=1)
    history = sapo_env.runtime.run(env, nodes, seed=0)

``factory`` is called in the actor: pass a function (a class, a ``functools.partial``), not a
built agent, so that a model is loaded where it runs. ``num_gpus=1`` gives the actor one GPU
(Ray sets ``CUDA_VISIBLE_DEVICES``; the GRPO agent's ``device="auto"`` then picks it). Ratio
policies stay in the driver and work unchanged. What the actor's agent offers besides
``act``/``learn`` (``state_dict``, ``save``, ...) is reached through :meth:`RemoteAgent.call`.

Several nodes can share one actor (``remote_joint``, ``remote_swarm(..., nodes_per_actor=4)``):
a shared base model, or light nodes for which a remote call per node and round would cost more
than their work. The actors run at once; the nodes inside one run one after the other.

When an actor dies (its process, or its machine), or its agent could not be built, its calls
raise ``sapo_env.runtime.NodeFailure``: the runner removes the node from the swarm and the run
goes on. With ``sapo_env.runtime.run(..., deadline=...)`` the rounds do not wait for slow nodes
(``sapo_env.runtime.asynchronous``).

Trust (docs/ray.md): an agent's results reach the driver as plain data only. The actor turns
each into bytes (actions and learn metrics as JSON, numpy arrays as lists; ``call``'s results as
``sapo_env.runtime.plain_data``; an exception as its text); Ray hands ``bytes`` over raw, never
through pickle, and the driver reads them with ``json.loads`` / ``plain_data.decode``, which
build only containers, strings and numbers. An action whose ``__reduce__`` runs a command costs
its node the round and runs nowhere. This guards the driver against what agents produce, not
against a process that takes over a Ray worker (Ray's own protocol pickles: a cluster's machines
trust each other).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

import numpy as np

from sapo_env.extras import require
from sapo_env.runtime import plain_data
from sapo_env.runtime.agent_calls import (
    UNREADABLE,
    AgentCalls,
    NodeFailure,
    plain_metrics,
    unreadable,
)
from sapo_env.scoring.rg_fixes import load_reasoning_gym
from sapo_env.types import Action, Group, Observation

logger = logging.getLogger(__name__)


class RemoteError(RuntimeError):
    """A remote agent's method raised, or its result is not plain data (the message says)."""


# --- in the actor: every answer is bytes, whatever the agent does ---------------------------

def _json(value: Any) -> bytes:
    return json.dumps(value, default=_numpy, separators=(",", ":")).encode()


def _numpy(value: Any) -> Any:
    """``json``'s hook: numpy numbers and numeric arrays (a ``num_external`` of ``np.int64``,
    per-token ``logprobs``) as JSON numbers and lists, mappings as objects; anything else is
    not plain data."""
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf":
        return value.tolist()
    if isinstance(value, Mapping):  # a read-only one: the churn markers (OFFLINE, LEAVE, ...)
        return dict(value)
    raise TypeError(f"a {type(value).__module__}.{type(value).__qualname__} is not plain data "
                    "(JSON, numpy numbers and arrays)")


def _answer(call: Callable[[], Any], encode: Callable[[Any], bytes] = _json) -> bytes:
    """``{"value": call()}`` as bytes, or ``{"raised": "why not"}``: never an exception, which
    Ray would pickle to the driver with whatever its ``__reduce__`` holds."""
    done = "its agent raised"
    try:
        value = call()
        done = "its result is not plain data:"
        return encode({"value": value})
    except BaseException as error:  # noqa: BLE001 - sent on as text (see above)
        try:
            return encode({"raised": f"{done} {type(error).__name__}: {error}"[:500]})
        except BaseException:  # noqa: BLE001 - an exception whose __str__ raises
            return encode({"raised": f"{done} an exception that cannot be described"})


def _build(factory: Callable[[], Any]) -> tuple[Any, str | None]:
    """``factory()`` and None, or None and why it failed: the actor stays up and answers
    ``{"gone": why}`` (an actor that fails to start hands the driver a pickled error)."""
    try:
        built = factory()
        load_reasoning_gym()  # seconds of imports, not against an asynchronous run's first deadline
        return built, None
    except BaseException as error:  # noqa: BLE001 - sent on as text
        return None, f"{type(error).__name__}: {error}"[:500]


class _Node:
    """The Ray actor: holds one agent and runs its methods, answering bytes: ``run``'s as JSON
    (act, learn), ``call``'s as ``sapo_env.runtime.plain_data`` (state_dict, save, ...)."""

    def __init__(self, factory: Callable[[], Any]):
        self.agent, self.gone = _build(factory)

    def run(self, method: str, *args: Any, **kwargs: Any) -> bytes:
        return self._run(lambda: getattr(self.agent, method)(*args, **kwargs))

    def call(self, method: str, *args: Any, **kwargs: Any) -> bytes:
        return self._run(lambda: getattr(self.agent, method)(*args, **kwargs), plain_data.encode)

    def ready(self) -> bytes:
        """Answers once the actor is built (its calls run after ``__init__``)."""
        return self._run(lambda: None)

    def _run(self, call: Callable[[], Any], encode: Callable[[Any], bytes] = _json) -> bytes:
        return encode({"gone": self.gone}) if self.gone is not None else _answer(call, encode)


# --- in the driver: bytes read as plain data ------------------------------------------------

def _read(data: Any, decode: Callable[[Any], Any] = json.loads) -> tuple[Any, str | None]:
    """An actor's answer: ``(value, None)``, or ``(None, why)`` when its agent raised or the
    answer is not plain data; ``NodeFailure`` if its agent could not be built."""
    try:
        if type(data) not in (bytes, str):
            raise TypeError(f"a {type(data).__name__}")
        ((kind, value),) = decode(data).items()  # one entry: value, raised or gone
    except Exception as error:  # noqa: BLE001 - whatever junk makes decoding raise
        return None, f"it sent back what is not plain data ({type(error).__name__})"
    if kind == "value":
        return value, None
    message = value[:500] if type(value) is str else "?"
    if kind == "gone":
        raise NodeFailure(f"its agent could not be built ({message})")
    if kind == "raised":
        return None, message
    return None, "it sent back what is not plain data (an unknown answer)"


def _action(data: Any) -> Any:
    """A remote node's action (JSON: an object or null) for the runner's screen, or
    ``unreadable(why)``."""
    value, why = _read(data)
    if why is None and value is not None and type(value) is not dict:
        why = f"an action is a JSON object or null, got a {type(value).__name__}"
    return value if why is None else unreadable(why)


def _metrics(who: str, data: Any) -> Any:
    """Learn metrics sent back (node -> metrics from a joint actor), or None (logged)."""
    value, why = _read(data)
    if why is not None:  # value is None
        logger.warning("%s: its update is lost: %s", who, why)
    return value


def _result(data: Any) -> Any:
    """What a ``call`` returned, read by ``plain_data.decode``; ``RemoteError`` otherwise."""
    value, why = _read(data if type(data) is bytes else None, plain_data.decode)
    if why is not None:
        raise RemoteError(why)
    return value


def _future(call: Any, read: Callable[[Any], Any]) -> Future:
    """A Ray call's result as a ``Future`` of ``read(result)``; ``NodeFailure`` if it died."""
    ray = require("ray", "agents.wrappers.remote")
    relayed: Future = Future()

    def relay(done: Future) -> None:
        try:
            relayed.set_result(read(done.result()))
        except ray.exceptions.RayActorError as error:
            relayed.set_exception(NodeFailure(f"its Ray actor died ({type(error).__name__})"))
        except BaseException as error:  # noqa: BLE001 - passed on as it is
            relayed.set_exception(error)

    call.future().add_done_callback(relay)
    return relayed


def _acted(action: Any) -> Action:
    """A node's action for whoever calls ``act`` directly: ``RemoteError`` if unreadable."""
    if not (isinstance(action, Mapping) and UNREADABLE in action):
        return action
    raise RemoteError(action[UNREADABLE])


def _require_ray() -> Any:
    """The ``ray`` module, started (one line naming the ``ray`` extra when it is missing)."""
    ray = require("ray", "agents.wrappers.remote (nodes in Ray actors)")
    if not ray.is_initialized():
        raise RuntimeError("call ray.init() (or ray.init(address=...)) before building "
                           "remote nodes")
    return ray


class _Handle:
    """Any method of the agent, through each handle's ``submit``; a checkpoint's two."""

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``agent.method(*args, **kwargs)`` in the actor, waited for: its result as plain
        data (``sapo_env.runtime.plain_data``); ``RemoteError``, with the message, when the
        method raised or its result is not plain data."""
        return self.submit(method, *args, **kwargs).result()

    def state_dict(self) -> dict[str, Any]:
        return self.call("state_dict")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.call("load_state_dict", state)


class RemoteAgent(_Handle):
    """A handle on an agent that lives in a Ray actor (see the module docstring)."""

    def __init__(self, factory: Callable[[], Any], num_cpus: float = 1, num_gpus: float = 0,
                 **actor_options: Any):
        if not callable(factory):
            raise TypeError(f"factory must be a callable that builds the agent, got {factory!r}")
        ray = _require_ray()
        actor = ray.remote(_Node).options(num_cpus=num_cpus, num_gpus=num_gpus, **actor_options)
        self.actor = actor.remote(factory)

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Future:
        """Start ``agent.method(*args, **kwargs)`` in the actor; a future of its result."""
        return _future(self.actor.call.remote(method, *args, **kwargs), _result)

    def submit_act(self, observation: Observation) -> Future:
        return _future(self.actor.run.remote("act", observation), _action)

    def submit_learn(self, batch: Sequence[Group]) -> Future:
        return _future(self.actor.run.remote("learn", batch), lambda data: plain_metrics(
            "a remote node", _metrics("a remote node", data)))

    def submit_ready(self) -> Future:
        """A future that resolves once the actor has built its agent."""
        return _future(self.actor.ready.remote(), _read)

    def act(self, observation: Observation) -> Action:
        return _acted(self.submit_act(observation).result())

    def learn(self, batch: Sequence[Group]) -> Any:
        return self.submit_learn(batch).result()

    def kill(self) -> None:
        """End the actor (its agent and whatever it holds)."""
        require("ray", "agents.wrappers.remote").kill(self.actor)


def remote(factory: Callable[[], Any], num_cpus: float = 1, num_gpus: float = 0,
           **actor_options: Any) -> RemoteAgent:
    """``factory()`` in its own Ray actor with these resources (``actor_options`` go to
    ``ray.remote(...).options``: ``resources``, ``scheduling_strategy``, ...)."""
    return RemoteAgent(factory, num_cpus=num_cpus, num_gpus=num_gpus, **actor_options)


def remote_swarm(factories: Mapping[str, Callable[[], Any]], num_cpus: float = 1,
                 num_gpus: float = 0, nodes_per_actor: int = 1, **actor_options: Any
                 ) -> dict[str, RemoteAgent | RemoteMember]:
    """Node name -> a handle on ``factories[name]()`` built in a Ray actor; each actor gets
    these resources. ``nodes_per_actor=1``: one actor per node (``RemoteAgent``s). More packs
    that many consecutive nodes into each actor (``remote_joint``, named here): two remote
    calls a round for all of them, which pays for light nodes (simulated learners); an actor's
    nodes work one after the other."""
    if isinstance(nodes_per_actor, bool) or not isinstance(nodes_per_actor, int) \
            or nodes_per_actor < 1:
        raise ValueError(f"nodes_per_actor must be an int >= 1, got {nodes_per_actor!r}")
    if nodes_per_actor == 1:
        return {a: remote(f, num_cpus, num_gpus, **actor_options) for a, f in factories.items()}
    names = list(factories)
    handles: dict[str, RemoteAgent | RemoteMember] = {}
    for start in range(0, len(names), nodes_per_actor):
        chunk = {a: factories[a] for a in names[start:start + nodes_per_actor]}
        handles.update(remote_joint(partial(_build_each, chunk), num_cpus, num_gpus,
                                    names=list(chunk), **actor_options))
    return handles


def _build_each(factories: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """In a ``remote_joint`` actor: each node built by its own factory."""
    return {a: f() for a, f in factories.items()}


def _named(factory: Callable[[], Any], names: Sequence[str] | None) -> dict[str, Any]:
    """In a ``remote_joint`` actor: its nodes by name (``ValueError`` if not ``names``)."""
    agents = factory()
    if not isinstance(agents, Mapping):
        agents = dict(zip(names or [f"node_{i}" for i in range(len(agents))], agents,
                          strict=True))
    if names is not None and list(agents) != list(names):
        raise ValueError(f"its factory built nodes {list(agents)}, not {list(names)}")
    return dict(agents)


class _Swarm:
    """The Ray actor of ``remote_joint``: owns several nodes (a LoRA swarm on one base),
    answering bytes as ``_Node`` does."""

    def __init__(self, factory: Callable[[], Mapping[str, Any] | Sequence[Any]],
                 names: Sequence[str] | None = None):
        self.agents, self.gone = _build(partial(_named, factory, names))
        self.calls = AgentCalls(self.agents or {})

    def names(self) -> bytes:
        return self._run(lambda: list(self.agents))

    def act(self, observations: Mapping[str, Observation]) -> bytes:
        # each node's action encoded on its own: one that is not plain data costs only its node
        return self._run(lambda: {a: _answer(lambda action=action: action).decode()
                                  for a, action in self.calls.act(observations).items()})

    def learn(self, batches: Mapping[str, Sequence[Group]]) -> bytes:
        return self._run(lambda: self.calls.learn(batches))

    def call(self, node: str, method: str, *args: Any, **kwargs: Any) -> bytes:
        return self._run(lambda: getattr(self.agents[node], method)(*args, **kwargs),
                         plain_data.encode)

    def _run(self, call: Callable[[], Any], encode: Callable[[Any], bytes] = _json) -> bytes:
        return encode({"gone": self.gone}) if self.gone is not None else _answer(call, encode)


class _RemoteJointActor:
    """The runner's ``ConcurrentJointActor`` for the nodes of one ``_Swarm`` actor: one remote
    call a round to act for all of them, one to learn. Each node's action is read on its own
    (``_action``); the runner keeps only the nodes it asked for."""

    def __init__(self, actor: Any):
        self.actor = actor

    def submit_act_jointly(self, observations: Mapping[str, Observation]) -> Future:
        return _future(self.actor.act.remote(dict(observations)),
                       partial(_joint_actions, list(observations)))

    def submit_learn_jointly(self, batches: Mapping[str, Sequence[Group]]) -> Future:
        return _future(self.actor.learn.remote(dict(batches)),
                       partial(_metrics, ", ".join(batches)))

    def act_jointly(self, observations: Mapping[str, Observation]) -> dict[str, Action]:
        return self.submit_act_jointly(observations).result()


def _joint_actions(asked: list[str], data: Any) -> dict[str, Any]:
    """A ``_Swarm``'s node -> action, each read by ``_action`` (all unreadable if junk)."""
    value, why = _read(data)
    if why is None and type(value) is not dict:
        why = f"it sent back a {type(value).__name__}, not node -> action"
    if why is not None:
        return dict.fromkeys(asked, unreadable(f"its joint actor: {why}"))
    return {a: _action(text) for a, text in value.items()}


class RemoteMember(_Handle):
    """A handle on one node of a ``remote_joint`` actor: it acts with its actor-mates in one
    call (a ``JointMember``) and learns in the actor."""

    def __init__(self, joint_actor: _RemoteJointActor, name: str):
        self.joint_actor = joint_actor
        self.name = name

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Future:
        return _future(self.joint_actor.actor.call.remote(self.name, method, *args, **kwargs),
                       _result)

    def act(self, observation: Observation) -> Action:
        actions = self.joint_actor.act_jointly({self.name: observation})
        return _acted(actions.get(self.name, unreadable("its joint actor sent no action")))

    def learn(self, batch: Sequence[Group]) -> Any:
        return self.call("learn", batch)


def remote_joint(factory: Callable[[], Mapping[str, Any] | Sequence[Any]],
                 num_cpus: float = 1, num_gpus: float = 0, *,
                 names: Sequence[str] | None = None, **actor_options: Any
                 ) -> dict[str, RemoteMember]:
    """Several nodes in one Ray actor, for nodes that share a model (``agents.lm.lora.lora_swarm``
    on one base) or nodes too light to pay for an actor each: ``factory()`` returns them (a
    mapping node -> agent, or a list); they act in one call per round, as in process, and
    learn in another.

    ``names``: the nodes the actor hosts, decided here in the driver (a list from the factory
    takes them in order; a mapping must have exactly them, or its nodes leave at their first
    call, ``NodeFailure``). Give them for an actor you do not trust: None asks the actor
    (``node_0``, ``node_1``, ... for a list, the mapping's keys), waiting for it to be built,
    and takes its word. Either way the runner asks the actor only for the nodes mapped to its
    handles and drops whatever else it answers (``sapo_env.runtime.agent_calls``)."""
    ray = _require_ray()
    if names is not None:
        names = list(names)
        if not names or not all(type(a) is str for a in names) or len(set(names)) < len(names):
            raise ValueError(f"names must be distinct node names (str), got {names!r}")
    actor = ray.remote(_Swarm).options(num_cpus=num_cpus, num_gpus=num_gpus,
                                       **actor_options).remote(factory, names)
    if names is None:
        names, why = _read(ray.get(actor.names.remote()))  # bytes: Ray unpickles nothing
        if why is not None or type(names) is not list or not all(type(a) is str for a in names):
            raise ValueError(f"the actor's node names are not strings: {why or names!r:.200}")
    joint = _RemoteJointActor(actor)
    return {name: RemoteMember(joint, name) for name in dict.fromkeys(names)}
