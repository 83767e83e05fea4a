"""What a harness's sweep on the shared skeleton (``sapo_experiments.sweep``) leaves behind,
checked the same way for every harness: one run file per spec, each holding what ``compute``
makes of its spec alone under the key the harness has always given that run (so finished runs
stay reusable), and a summary.json with its keys and settings in order."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sapo_experiments.run_files import load_run


def run_key(key: dict[str, Any]) -> str:
    """The key a harness writes in a run's meta for the settings ``key``."""
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_runs(out: Path, specs: Sequence[Any], compute: Callable[[Any], Any],
               old_key: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """Assert that ``out/runs`` holds one file per spec and nothing else, each file's arrays
    being ``compute(spec)``'s (those named ``*seconds``, timings, by shape only) and its meta key
    ``run_key(old_key(spec))``; return the saved runs in the order of ``specs``."""
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        f"{s.name}.npz" for s in specs)
    runs = []
    for spec in specs:
        saved, alone = load_run(spec.path), compute(spec).arrays
        assert set(saved) == {"meta", *alone}
        for name, array in alone.items():
            if name.endswith("seconds"):  # timings differ from run to run: their shape alone
                assert saved[name].shape == array.shape, f"{spec.name}: {name}"
            else:
                np.testing.assert_array_equal(saved[name], array, err_msg=f"{spec.name}: {name}")
        assert saved["meta"]["key"] == run_key(old_key(spec)), spec.name
        runs.append(saved)
    return runs


def check_summary(out: Path, keys: Sequence[str], settings: set[str]) -> dict[str, Any]:
    """Assert that ``out/summary.json`` has ``keys`` in this order, was written by one job and
    records exactly ``settings``; return it."""
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == list(keys)
    assert summary["jobs"] == 1 and set(summary["settings"]) == settings
    return summary
