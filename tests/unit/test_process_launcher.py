"""How the process launchers hand a job's process its task function."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
from omegaconf import DictConfig

from hydra_plugins.runner_launcher.process_launcher import portable


def run(cfg: DictConfig) -> int:
    return 1


@pytest.mark.parametrize(("spec_name", "by_name"), [("runner.__main__", True), (None, False)], ids=["-m", "script"])
def test_a_task_of_a_python_m_main_goes_by_name_and_any_other_as_itself(
    monkeypatch: pytest.MonkeyPatch, spec_name: str | None, by_name: bool
) -> None:
    # `python -m runner` runs runner/__main__.py as __main__ with its spec, which spawn does not import again
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.util.find_spec(spec_name) if spec_name else None
    main.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert portable(run) == (("runner.__main__", "run") if by_name else run)

    def closure(cfg: DictConfig) -> int:
        return 2

    assert portable(closure) is closure  # not an attribute of __main__: cloudpickle copies it
