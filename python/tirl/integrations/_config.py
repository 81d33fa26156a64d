"""Reading a trainer's config without knowing its type: a dataclass, an OmegaConf node or
a plain mapping, by ``.get`` where it has one, else by attribute."""

from collections.abc import Mapping
from typing import Any


def read(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]``, or ``default`` when the config is None or lacks the key (a value
    of None also gives ``default``)."""
    if config is None:
        return default
    if isinstance(config, Mapping) or callable(getattr(config, "get", None)):
        try:
            value = config.get(key, default)
        except Exception:  # e.g. a structured OmegaConf node refusing an unknown key
            value = getattr(config, key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value
