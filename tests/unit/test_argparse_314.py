"""`python -m runner` under Python 3.14's argparse, on this older Python (hydra issue 3121).

3.14's `add_argument` runs `ArgumentParser._check_help(action)` before it adds the action: the
formatter's `_expand_help`, which asks `'%' in help` and, if so, formats the help with the action's
fields; any ValueError, TypeError or KeyError becomes ValueError("badly formed help string").
`argparse_314` puts that check into an older Python's argparse (3.14's own is used where it has one),
so the parser Hydra builds meets it.
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Callable

import pytest

from runner.compose import CHECK_HELP, hydra_help_checkable

RunnerInProcess = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def argparse_314(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Action]:
    """argparse with 3.14's check of each added help (this Python's own from 3.14); returns the actions it checked."""
    checked: list[argparse.Action] = []
    own = getattr(argparse.ArgumentParser, CHECK_HELP, None)

    def check_help(parser: argparse.ArgumentParser, action: argparse.Action) -> None:
        if own is not None:
            own(parser, action)
        elif action.help:
            try:
                if "%" in action.help:  # 3.14's first question; older formatters go straight to `%`
                    parser._get_formatter()._expand_help(action)
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError("badly formed help string") from exc
        checked.append(action)

    add_action = argparse.ArgumentParser._add_action

    def add_checked(parser: argparse.ArgumentParser, action: argparse.Action) -> argparse.Action:
        getattr(parser, CHECK_HELP)(action)  # looked up on each call, as 3.14 does: a patched check applies
        return add_action(parser, action)

    monkeypatch.setattr(argparse.ArgumentParser, CHECK_HELP, check_help, raising=False)
    if own is None:  # before 3.14, add_argument checks nothing
        monkeypatch.setattr(argparse.ArgumentParser, "_add_action", add_checked)
    return checked


def test_the_runner_composes_under_the_314_check(
    argparse_314: list[argparse.Action], runner_in_process: RunnerInProcess
) -> None:
    done = runner_in_process("+workload=rmsnorm_naive", "--cfg", "job")

    assert done.returncode == 0, done.stderr
    assert "rmsnorm" in done.stdout
    assert {"--shell-completion", "--multirun", "--cfg"} <= {s for a in argparse_314 for s in a.option_strings}
    assert all(a.help is None or isinstance(a.help, str) for a in argparse_314)  # every help as argparse reads one
    assert getattr(argparse.ArgumentParser, CHECK_HELP).__name__ == "check_help"  # argparse's own again after


def test_a_malformed_string_help_is_still_refused(argparse_314: list[argparse.Action]) -> None:
    with hydra_help_checkable(), pytest.raises(ValueError, match="badly formed help string"):
        argparse.ArgumentParser().add_argument("--share", help="100% of it")
