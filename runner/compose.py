"""Compose the runner's config as `python -m runner` would, without a job; `--help` composes once, not ninety times."""

from __future__ import annotations

import argparse
import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import CompactHydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from runner import CONF_DIR
from runner.config_loading import register_schemas, unknown_key, unknown_option


def compose_config(*overrides: str, with_hydra: bool = False) -> DictConfig:
    """Return the composed config; `with_hydra` keeps the `hydra` node (sweeper params etc.)."""
    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)


def _config_groups() -> str:
    """One line per config group of conf/ (the registry), its options sorted, as Hydra's help lists them."""
    groups = sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra")
    return "".join(f"{group.name}: {', '.join(sorted(f.stem for f in group.glob('*.yaml')))}\n" for group in groups)


def help_text(*overrides: str) -> str:
    """`python -m runner --help`: conf/config.yaml's help template with the groups and the composed config."""
    cfg = compose_config(*overrides, with_hydra=True)
    template = string.Template(cfg.hydra.help.template)
    with open_dict(cfg):
        del cfg["hydra"]
    return template.substitute(APP_CONFIG_GROUPS=_config_groups(), CONFIG=OmegaConf.to_yaml(cfg))


def refusal(err: CompactHydraException | yaml.YAMLError) -> str:
    """What Hydra refused, as one line; keys and options get the runner's "did you mean", not Hydra's `+` advice.

    A conf file that is not YAML (adding conf/workload/<name>.yaml adds a workload) is its file, line and problem.
    """
    if isinstance(err, yaml.YAMLError):
        return _yaml_refusal(err)
    cause = err.__cause__
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        group, _, option = err.missing_cfg_file.rpartition("/")
        return str(unknown_option(group, option, err.options))
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and isinstance(cause.parent_node, DictConfig):
        return str(unknown_key(str(cause.full_key), [str(key) for key in cause.parent_node if key != "hydra"]))
    texts = [str(err), str(cause.msg)] if isinstance(cause, OmegaConfBaseException) else [str(err)]
    lines = [line for text in texts for line in text.splitlines() if line.strip() and not line[0].isspace()]
    return "; ".join(lines)


def _yaml_refusal(err: yaml.YAMLError) -> str:
    """A YAML syntax error as one line: the file, the line and column, what is wrong (PyYAML's lines are 0-based)."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return f"a config file is not valid YAML: {' '.join(str(err).split())}"
    mark, context = err.problem_mark, err.context_mark
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}"
    opened = f" ({err.context} at line {context.line + 1})" if err.context and context is not None else ""
    return f"{where}: {err.problem}{opened}: not valid YAML"


# Python 3.14's add_argument checks each help with `'%' in help` (ArgumentParser._check_help); before it, no such hook
CHECK_HELP = "_check_help"


@contextmanager
def hydra_help_checkable() -> Iterator[None]:
    """Let Python 3.14's argparse check Hydra 1.3's lazy `--shell-completion` help (hydra issue 3121, open).

    hydra-core 1.3.8 passes an object with only `__repr__` as that help, so `'%' in help` raises and
    `@hydra.main` fails with "badly formed help string" before it parses anything. A help that fails the
    check and is not a string is replaced by its text (what Hydra's --hydra-help prints), then checked again;
    every help that passes, Hydra's too once a release fixes it, is left as it is. No-op before 3.14.
    """
    check: Callable[[argparse.ArgumentParser, argparse.Action], None] | None
    check = getattr(argparse.ArgumentParser, CHECK_HELP, None)
    if check is None:
        yield
        return

    def check_as_text(parser: argparse.ArgumentParser, action: argparse.Action) -> None:
        try:
            check(parser, action)
        except ValueError:
            if action.help is None or isinstance(action.help, str):
                raise
            action.help = str(action.help)
            check(parser, action)

    own = CHECK_HELP in vars(argparse.ArgumentParser)  # else inherited from argparse's _ActionsContainer
    setattr(argparse.ArgumentParser, CHECK_HELP, check_as_text)
    try:
        yield
    finally:
        if own:
            setattr(argparse.ArgumentParser, CHECK_HELP, check)
        else:
            delattr(argparse.ArgumentParser, CHECK_HELP)
