"""The settings files: where they are (shipped, user, project) and how one is read, with the bounds
on its size and numbers that every layer shares.
"""

from __future__ import annotations

import os
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from squadd.errors import ConfigError

MAX_CONFIG_FILE_BYTES = 1_048_576
MAX_SETTING_NUMBER = 10**15
"""The largest magnitude any number in a config file may have (no setting needs more)."""
MAX_SETTING_SECONDS = 100_000_000
"""The longest duration (a `*_s` key) in seconds, about three years: longer waits overflow
the clocks and timers they reach."""
_LONG_NUMBER = re.compile(r"^\s*([^=#\[\s][^=#]*?)\s*=\s*[\[{]?\s*[+-]?[0-9][0-9_]{99,}")


def data_path(name: str) -> Path:
    """A folder shipped with squadd (`config` or `agents_template`), installed or in a checkout."""
    packaged = Path(str(resources.files("squadd"))) / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / name
    if checkout.is_dir():
        return checkout
    raise ConfigError(f"squadd's bundled {name}/ folder is missing: reinstall squadd")


def default_config_file() -> Path:
    return data_path("config") / "squadd.toml"



def user_config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "squadd" / "config.toml"


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_FILE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}", source=str(path)) from exc
    if len(data) > MAX_CONFIG_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_FILE_BYTES} bytes: a config file "
                          "is a few settings", source=str(path))
    try:
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", source=str(path)) from exc
    except UnicodeDecodeError as exc:  # a ValueError too: before the clause below
        raise ConfigError(f"{path}: not valid UTF-8: {exc}", source=str(path)) from exc
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise _long_number_error(path, data.decode("utf-8", "replace")) from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply",
                          source=str(path)) from None


def _long_number_error(path: Path, text: str) -> ConfigError:
    """The error for a file holding an integer too long to read: it names the key."""
    table = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and "=" not in stripped.split("]", 1)[0]:
            table = stripped.strip("[]").strip()
            continue
        found = _LONG_NUMBER.match(line)
        if found is not None:
            key = f"{table}.{found.group(1).strip()}" if table else found.group(1).strip()
            return ConfigError(f"{path}: '{key}' holds a number too large for any setting "
                               f"(at most {MAX_SETTING_NUMBER:,})", key=key, source=str(path))
    return ConfigError(f"{path}: holds a number too large for any setting (at most "
                       f"{MAX_SETTING_NUMBER:,})", source=str(path))


