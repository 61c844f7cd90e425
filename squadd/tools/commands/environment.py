"""The environment a command of a tool or a hook gets: squadd's own, without its secrets (the
provider's API key, anything named like a key, token, secret or password) and without the
scoped variables of other tools."""

from __future__ import annotations

import re
from collections.abc import Mapping

from squadd.config import Settings

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def command_environment(settings: Settings, environ: Mapping[str, str],
                        scoped: frozenset[str] = frozenset()) -> dict[str, str]:
    """squadd's environment without its secrets, and without the tools' scoped variables
    (`scoped`: `bash` declares none, so every one is another tool's)."""
    hidden = ({settings.provider.api_key_env} | scoped) - {""}
    return {name: value for name, value in environ.items()
            if name not in hidden and not SECRET_NAME.search(name)}
