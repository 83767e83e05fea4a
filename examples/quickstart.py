"""Quickstart: a small swarm of scripted nodes for a few rounds, with a per-node reward table.

The same as ``sapo-env demo``; its code, the loop every experiment uses, is in
``sapo_experiments/demo.py``::

    env = sapo_env.parallel_env(n=4)
    history = sapo_env.runtime.run(env, agents)

Run:  python examples/quickstart.py [--rounds 5] [--seed 0] [--render]
"""

from sapo_experiments.demo import main

if __name__ == "__main__":
    main()
