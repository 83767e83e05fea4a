"""Nodes in Ray actors: ``remote(factory, num_cpus=1, num_gpus=0)`` builds ``factory()`` inside
its own Ray actor (its own process, on any machine of the cluster) and returns a local handle
that is an agent like any other. The env stays in the driver; ``sapo_env.runtime.run`` starts every
remote node's ``act`` (then ``learn``) before it waits for any, so the nodes work at the same
time. A round is synchronous: the run is exactly the in-process run for the same seed, since
each node computes what it would compute at home (``tests/test_remote.py`` checks it).

Use::

    import ray
    from agents.remote import remote_swarm
    from agents.simulated import SimulatedLearner

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

An actor loads reasoning-gym (about 3 s of imports) when it builds its node, whether or not
the node re-derives questions with it (demonstrators and simulated learners do): ``import
sapo_env`` does not load it, and a node's first act would otherwise pay for it, against the
first deadline of an asynchronous run that waited for the actors to be up.

When an actor dies (its process, or its machine), its calls raise ``sapo_env.runtime.NodeFailure``:
the runner removes the node from the swarm and the run goes on. With ``sapo_env.runtime.run(...,
deadline=...)`` the rounds do not wait for slow nodes (``sapo_env.runtime.asynchronous``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from sapo_env.runtime.agent_calls import AgentCalls, NodeFailure
from sapo_env.scoring.rg_fixes import load_reasoning_gym
from sapo_env.types import Action, Group, Observation


def _future(call: Any) -> Future:
    """A Ray call's result as a ``Future`` that fails with ``NodeFailure`` when the actor died
    (a bug in the agent stays the exception it is)."""
    import ray

    relayed: Future = Future()

    def relay(done: Future) -> None:
        try:
            relayed.set_result(done.result())
        except ray.exceptions.RayActorError as error:
            relayed.set_exception(NodeFailure(f"its Ray actor died ({type(error).__name__})"))
        except BaseException as error:  # noqa: BLE001 - passed on as it is
            relayed.set_exception(error)

    call.future().add_done_callback(relay)
    return relayed


class _Node:
    """The Ray actor: holds one agent and runs its methods."""

    def __init__(self, factory: Callable[[], Any]):
        self.agent = factory()
        load_reasoning_gym()  # part of start-up, not of the first act (see below)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.agent, method)(*args, **kwargs)

    def ready(self) -> None:
        """Answers once the actor is built (its calls run after ``__init__``)."""


class RemoteAgent:
    """A handle on an agent that lives in a Ray actor (see the module docstring)."""

    def __init__(self, factory: Callable[[], Any], num_cpus: float = 1, num_gpus: float = 0,
                 **actor_options: Any):
        import ray  # the ray extra: pip install "sapo-env[ray]"

        if not callable(factory):
            raise TypeError(f"factory must be a callable that builds the agent, got {factory!r}")
        if not ray.is_initialized():
            raise RuntimeError("call ray.init() (or ray.init(address=...)) before building "
                               "remote nodes")
        actor = ray.remote(_Node).options(num_cpus=num_cpus, num_gpus=num_gpus, **actor_options)
        self.actor = actor.remote(factory)

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Future:
        """Start ``agent.method(*args, **kwargs)`` in the actor; a future of its result."""
        return _future(self.actor.call.remote(method, *args, **kwargs))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``agent.method(*args, **kwargs)`` in the actor, waited for."""
        return self.submit(method, *args, **kwargs).result()

    def submit_act(self, observation: Observation) -> Future:
        return self.submit("act", observation)

    def submit_learn(self, batch: Sequence[Group]) -> Future:
        return self.submit("learn", batch)

    def submit_ready(self) -> Future:
        """A future that resolves once the actor has built its agent."""
        return _future(self.actor.ready.remote())

    def act(self, observation: Observation) -> Action:
        return self.call("act", observation)

    def learn(self, batch: Sequence[Group]) -> Any:
        return self.call("learn", batch)

    def state_dict(self) -> dict[str, Any]:
        return self.call("state_dict")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.call("load_state_dict", state)

    def kill(self) -> None:
        """End the actor (its agent and whatever it holds)."""
        import ray

        ray.kill(self.actor)


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
    that many consecutive nodes into each actor (``remote_joint``): each actor then costs two
    remote calls a round for all its nodes, which pays for light nodes (simulated learners,
    whose round is far shorter than a remote call), and its nodes work one after the other."""
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
                                    **actor_options))
    return handles


def _build_each(factories: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """In a ``remote_joint`` actor: each node built by its own factory."""
    return {a: f() for a, f in factories.items()}


class _Swarm:
    """The Ray actor of ``remote_joint``: owns several nodes (a LoRA swarm on one base)."""

    def __init__(self, factory: Callable[[], Mapping[str, Any] | Sequence[Any]]):
        agents = factory()
        load_reasoning_gym()  # part of start-up, as in _Node
        self.agents = dict(agents) if isinstance(agents, Mapping) else \
            {f"node_{i}": a for i, a in enumerate(agents)}
        self.calls = AgentCalls(self.agents)

    def names(self) -> list[str]:
        return list(self.agents)

    def act(self, observations: Mapping[str, Observation]) -> dict[str, Action]:
        return self.calls.act(observations)

    def learn(self, batches: Mapping[str, Sequence[Group]]) -> dict[str, dict[str, float]]:
        return self.calls.learn(batches)

    def call(self, node: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.agents[node], method)(*args, **kwargs)


class _RemoteJointActor:
    """The runner's ``ConcurrentJointActor`` for the nodes of one ``_Swarm`` actor: one remote
    call a round to act for all of them, one to learn."""

    def __init__(self, actor: Any):
        self.actor = actor

    def submit_act_jointly(self, observations: Mapping[str, Observation]) -> Future:
        return _future(self.actor.act.remote(dict(observations)))

    def submit_learn_jointly(self, batches: Mapping[str, Sequence[Group]]) -> Future:
        return _future(self.actor.learn.remote(dict(batches)))

    def act_jointly(self, observations: Mapping[str, Observation]) -> dict[str, Action]:
        return self.submit_act_jointly(observations).result()


class RemoteMember:
    """A handle on one node of a ``remote_joint`` actor: it acts with its actor-mates in one
    call (a ``JointMember``) and learns in the actor."""

    def __init__(self, joint_actor: _RemoteJointActor, name: str):
        self.joint_actor = joint_actor
        self.name = name

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Future:
        return _future(self.joint_actor.actor.call.remote(self.name, method, *args, **kwargs))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.submit(method, *args, **kwargs).result()

    def act(self, observation: Observation) -> Action:
        return self.joint_actor.act_jointly({self.name: observation})[self.name]

    def learn(self, batch: Sequence[Group]) -> Any:
        return self.call("learn", batch)

    def state_dict(self) -> dict[str, Any]:
        return self.call("state_dict")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.call("load_state_dict", state)


def remote_joint(factory: Callable[[], Mapping[str, Any] | Sequence[Any]],
                 num_cpus: float = 1, num_gpus: float = 0, **actor_options: Any
                 ) -> dict[str, RemoteMember]:
    """Several nodes in one Ray actor, for nodes that share a model (``agents.lora.lora_swarm``
    on one base) or nodes too light to pay for an actor each: ``factory()`` returns them (a
    mapping node -> agent, or a list named ``node_0``, ``node_1``, ...); they act in one call
    per round, as in process, and learn in another."""
    import ray

    if not ray.is_initialized():
        raise RuntimeError("call ray.init() (or ray.init(address=...)) before building "
                           "remote nodes")
    actor = ray.remote(_Swarm).options(num_cpus=num_cpus, num_gpus=num_gpus,
                                       **actor_options).remote(factory)
    joint = _RemoteJointActor(actor)
    return {name: RemoteMember(joint, name) for name in ray.get(actor.names.remote())}
