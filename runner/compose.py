"""Compose the runner's config as `python -m runner` would, without a job; `--help` composes once, not ninety times."""

from __future__ import annotations

import string

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import CompactHydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from runner import CONF_DIR
from runner.config import register_schemas, unknown_key, unknown_option


def compose_config(*overrides: str, with_hydra: bool = False) -> DictConfig:
    """Return the composed config; `with_hydra` keeps the `hydra` node (sweeper params etc.)."""
    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)


def config_groups() -> str:
    """One line per config group of conf/ (the registry), its options sorted, as Hydra's help lists them."""
    groups = sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra")
    return "".join(f"{group.name}: {', '.join(sorted(f.stem for f in group.glob('*.yaml')))}\n" for group in groups)


def help_text(*overrides: str) -> str:
    """`python -m runner --help`: conf/config.yaml's help template with the groups and the composed config."""
    cfg = compose_config(*overrides, with_hydra=True)
    template = string.Template(cfg.hydra.help.template)
    with open_dict(cfg):
        del cfg["hydra"]
    return template.substitute(APP_CONFIG_GROUPS=config_groups(), CONFIG=OmegaConf.to_yaml(cfg))


def refusal(err: CompactHydraException | yaml.YAMLError) -> str:
    """What Hydra refused, as one line; keys and options get the runner's "did you mean", not Hydra's `+` advice.

    A conf file that is not YAML (adding conf/workload/<name>.yaml adds a workload) is its file, line and problem.
    """
    if isinstance(err, yaml.YAMLError):
        return yaml_refusal(err)
    cause = err.__cause__
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        group, _, option = err.missing_cfg_file.rpartition("/")
        return str(unknown_option(group, option, err.options))
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and isinstance(cause.parent_node, DictConfig):
        return str(unknown_key(str(cause.full_key), [str(key) for key in cause.parent_node if key != "hydra"]))
    texts = [str(err), str(cause.msg)] if isinstance(cause, OmegaConfBaseException) else [str(err)]
    lines = [line for text in texts for line in text.splitlines() if line.strip() and not line[0].isspace()]
    return "; ".join(lines)


def yaml_refusal(err: yaml.YAMLError) -> str:
    """A YAML syntax error as one line: the file, the line and column, what is wrong (PyYAML's lines are 0-based)."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return f"a config file is not valid YAML: {' '.join(str(err).split())}"
    mark, context = err.problem_mark, err.context_mark
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}"
    opened = f" ({err.context} at line {context.line + 1})" if err.context and context is not None else ""
    return f"{where}: {err.problem}{opened}: not valid YAML"
