"""The engine's old flat module paths still import, as the modules that hold the code now.

Stored Flow definitions are pickles, and a pickle names a class by its module
path: a store written before the engine's sub-packages may name
``dex_agents_ray.engine._placement`` and its neighbours.
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import pytest

from dex_agents_ray.engine import Placement, PlacementMode
from dex_agents_ray.engine._moved import MOVED

ENGINE = Path(__file__).resolve().parents[2] / "dex_agents_ray" / "engine"


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_imports_the_module_that_holds_its_code(old: str, new: str) -> None:
    assert not (ENGINE / f"{old}.py").exists()
    module = importlib.import_module(f"dex_agents_ray.engine.{new}")
    assert importlib.import_module(f"dex_agents_ray.engine.{old}") is module
    assert module.__name__ == f"dex_agents_ray.engine.{new}"
    assert module.__spec__ is not None and module.__spec__.name == module.__name__


def test_every_moved_module_is_mapped() -> None:
    now = {
        path.relative_to(ENGINE).with_suffix("").as_posix().replace("/", ".")
        for path in ENGINE.glob("*/_*.py")
        if path.name != "__init__.py"
    }
    added = {
        "actors._config",
        "store._open",
        "sdk._version",
        "run._transactions",
        # The store's and the host's roles, split out since the flat paths were gone.
        "store._sqlite_db",
        "store._sqlite_runs",
        "store._postgres_db",
        "store._postgres_runs",
        "store._postgres_streams",
        "actors._residents",
        "actors._passivator",
        "actors._client_calls",
        "actors._attempt_reports",
        # Added since: a new module, never at a flat path.
        "run._fusion",
    }
    assert now - added == set(MOVED.values())


def test_a_pickle_that_names_an_old_path_loads() -> None:
    value = Placement(mode=PlacementMode.DEDICATED, shared_hosts=3)
    data = pickle.dumps(value, protocol=0)
    assert b"dex_agents_ray.engine.actors._placement" in data
    old = data.replace(
        b"dex_agents_ray.engine.actors._placement", b"dex_agents_ray.engine._placement"
    )
    assert pickle.loads(old) == value
    assert type(pickle.loads(old)) is Placement


def test_the_old_host_config_path_finds_it() -> None:
    from dex_agents_ray.engine.actors._config import HostConfig

    old = importlib.import_module("dex_agents_ray.engine._hosts")
    assert old.HostConfig is HostConfig


def test_an_unknown_old_name_is_still_missing() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("dex_agents_ray.engine._no_such_module")
