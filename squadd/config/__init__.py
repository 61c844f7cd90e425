"""Settings: the typed model and the one layered loader every part of squadd reads them through.

Layers, later wins: the shipped ``config/squadd.toml`` < ``~/.config/squadd/config.toml`` <
``.squad/config.toml`` < ``SQUADD_{SECTION}_{KEY}`` environment variables < explicit overrides
(command-line flags). An unknown key names the key and the file; a bad value names the key, the
value and what was expected.

``files`` finds and reads the files, ``models`` holds the typed sections, ``checks`` vets a layer
before it is merged, ``loader`` merges the layers, ``live`` says which changes apply at once.
Import from ``squadd.config``: the submodules are how it is laid out, not its interface.
"""

from squadd.config.files import (
    MAX_CONFIG_FILE_BYTES,
    MAX_SETTING_NUMBER,
    MAX_SETTING_SECONDS,
    data_path,
    default_config_file,
    user_config_file,
)
from squadd.config.live import LIVE_SECTIONS, changed_settings, is_live, with_live_sections
from squadd.config.loader import ENV_PREFIX, load_settings
from squadd.config.models import (
    AgentSettings,
    ApprovalsSettings,
    BudgetSettings,
    ClusterSettings,
    DaemonSettings,
    HooksSettings,
    LimitsSettings,
    NotifySettings,
    PoolSettings,
    PriceSettings,
    PromptSettings,
    ProviderSettings,
    RouteSettings,
    SandboxSettings,
    ScribeSettings,
    SessionSettings,
    Settings,
    TelemetrySettings,
    ToolsSettings,
    WorkspaceSettings,
    WorkspaceToolsSettings,
    shipped_pricing,
)

__all__ = [
    "ENV_PREFIX",
    "LIVE_SECTIONS",
    "MAX_CONFIG_FILE_BYTES",
    "MAX_SETTING_NUMBER",
    "MAX_SETTING_SECONDS",
    "AgentSettings",
    "ApprovalsSettings",
    "BudgetSettings",
    "ClusterSettings",
    "DaemonSettings",
    "HooksSettings",
    "LimitsSettings",
    "NotifySettings",
    "PoolSettings",
    "PriceSettings",
    "PromptSettings",
    "ProviderSettings",
    "RouteSettings",
    "SandboxSettings",
    "ScribeSettings",
    "SessionSettings",
    "Settings",
    "TelemetrySettings",
    "ToolsSettings",
    "WorkspaceSettings",
    "WorkspaceToolsSettings",
    "changed_settings",
    "data_path",
    "default_config_file",
    "is_live",
    "load_settings",
    "shipped_pricing",
    "user_config_file",
    "with_live_sections",
]
