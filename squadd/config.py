"""Settings: the typed model and the one layered loader every part of squadd reads them through.

Layers, later wins: the shipped ``config/squadd.toml`` < ``~/.config/squadd/config.toml`` <
``.squad/config.toml`` < ``SQUADD_{SECTION}_{KEY}`` environment variables < explicit overrides
(command-line flags). An unknown key names the key and the file; a bad value names the key, the
value and what was expected.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from squadd.contracts.names import NAME_RULE, is_safe_name
from squadd.contracts.workspaces import Isolation
from squadd.errors import ConfigError

ENV_PREFIX = "SQUADD_"
MAX_CONFIG_FILE_BYTES = 1_048_576
MAX_SETTING_NUMBER = 10**15
"""The largest magnitude any number in a config file may have (no setting needs more)."""
MAX_SETTING_SECONDS = 100_000_000
"""The longest duration (a `*_s` key) in seconds, about three years: longer waits overflow
the clocks and timers they reach."""
_LONG_NUMBER = re.compile(r"^\s*([^=#\[\s][^=#]*?)\s*=\s*[\[{]?\s*[+-]?[0-9][0-9_]{99,}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


class _Section(BaseModel):
    # No NaN or infinity: every timeout is a real bound, every limit a real number.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LimitsSettings(_Section):
    max_entry_bytes: int = Field(65536, ge=1)


class PoolSettings(_Section):
    max_concurrent: int = Field(8, ge=1, le=4096)
    max_queued: int = Field(256, ge=0, le=1_000_000)
    idle_timeout_s: float = Field(300.0, gt=0)
    max_idle: int = Field(1024, ge=0, le=1_000_000)
    ended_keep: int = Field(1024, ge=0, le=1_000_000)


class RouteSettings(_Section):
    max_depth: int = Field(3, ge=1, le=32)
    timeout_s: float = Field(300.0, gt=0)


class SessionSettings(_Section):
    max_turns: int = Field(30, ge=1, le=1000)


class PromptSettings(_Section):
    charter_bytes: int = Field(16384, ge=256)
    history_bytes: int = Field(24576, ge=256)
    decisions_bytes: int = Field(32768, ge=256)
    context_bytes: int = Field(16384, ge=256)
    skills_index_bytes: int = Field(4096, ge=256)


class ProviderSettings(_Section):
    kind: Literal["openai", "anthropic", "command", "replay"] = "openai"
    model: str = ""
    base_url: str = ""
    api_key_env: str = ""
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0)
    max_response_bytes: int = Field(4_194_304, ge=1024)
    max_attempts: int = Field(5, ge=1, le=20)
    max_retry_wait_s: float = Field(120.0, ge=0)
    retry_backoff_s: float = Field(1.0, ge=0)
    retry_backoff_max_s: float = Field(30.0, ge=0)
    max_tokens: int = Field(4096, ge=1)
    command: list[str] = Field(default_factory=list)
    command_timeout_s: float = Field(600.0, gt=0)
    command_max_output_bytes: int = Field(1_048_576, ge=1024)
    replay_file: str = ""
    record_file: str = ""


class ToolsSettings(_Section):
    max_output_lines: int = Field(2000, ge=1)
    max_output_bytes: int = Field(50_000, ge=1024)
    squad_result_bytes: int = Field(10240, ge=1024)
    timeout_s: float = Field(60.0, gt=0)
    approval_timeout_s: float = Field(300.0, gt=0)
    variable_timeout_s: float = Field(300.0, gt=0)
    extra_dirs: list[str] = Field(default_factory=list)
    cycod_dirs: bool = True
    cycod_global_dir: str = ""
    approvals: dict[str, Literal["allow", "ask", "deny"]] = Field(default_factory=dict)
    secrets_file: str = ""


class WorkspaceToolsSettings(_Section):
    max_read_bytes: int = Field(10_485_760, ge=1024)
    max_write_bytes: int = Field(10_485_760, ge=1)
    max_matches: int = Field(500, ge=1)
    max_line_chars: int = Field(2000, ge=80)
    bash_timeout_s: float = Field(120.0, gt=0)
    bash_max_timeout_s: float = Field(1800.0, gt=0)
    allow_squad_writes: bool = False
    grep: Literal["auto", "rg", "python"] = "auto"

    @model_validator(mode="after")
    def _timeouts_agree(self) -> WorkspaceToolsSettings:
        if self.bash_timeout_s > self.bash_max_timeout_s:
            raise ValueError(
                f"bash_timeout_s ({self.bash_timeout_s:g}) is over bash_max_timeout_s "
                f"({self.bash_max_timeout_s:g}): lower the first or raise the second")
        return self


class ScribeSettings(_Section):
    debounce_ms: int = Field(500, ge=0)
    poll_interval_s: float = Field(2.0, gt=0)
    max_inbox_file_bytes: int = Field(1_048_576, ge=1)
    archive_soft_bytes: int = Field(20480, ge=1)
    archive_soft_days: int = Field(30, ge=0)
    archive_hard_bytes: int = Field(51200, ge=1)
    archive_hard_days: int = Field(7, ge=0)
    history_compact_bytes: int = Field(15360, ge=1024)
    settle_ms: int = Field(1000, ge=0)
    max_backoff_s: float = Field(300.0, gt=0)


class DaemonSettings(_Section):
    grace_s: float = Field(10.0, ge=0)
    stop_timeout_s: float = Field(120.0, gt=0)
    event_buffer: int = Field(1024, ge=1)
    log_max_bytes: int = Field(10_485_760, ge=1024)
    log_backups: int = Field(3, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    header_timeout_s: float = Field(10.0, gt=0, le=3600)
    keep_alive_s: int = Field(5, ge=1, le=3600)
    max_connections: int = Field(512, ge=1, le=100_000)
    ui: bool = False
    ui_port: int = Field(0, ge=0, le=65535)


class WorkspaceSettings(_Section):
    isolation: Isolation = "shared"
    land: Literal["manual", "auto"] = "manual"
    land_check: str = ""
    land_check_timeout_s: float = Field(600.0, gt=0)
    setup: list[str] = Field(default_factory=list)
    setup_timeout_s: float = Field(600.0, gt=0)
    git_timeout_s: float = Field(120.0, gt=0)
    author_email: str = "{agent}@squad.local"
    keep_days: float = Field(7.0, ge=0)
    max_worktrees: int = Field(64, ge=1, le=4096)
    min_free_mb: int = Field(512, ge=0)
    spares: int = Field(1, ge=0, le=64)
    land_policy: Literal["green", "no-new-failures", ""] = ""
    land_check_report: str = ""
    repair_attempts: int = Field(2, ge=0, le=20)
    land_style: Literal["squash", "rebase"] = "squash"
    committer: str = ""
    keep_landed: bool = False

    @model_validator(mode="after")
    def _landing_agrees(self) -> WorkspaceSettings:
        if self.committer and not re.fullmatch(r"[^<>]+ <[^<>\s]+>", self.committer.strip()):
            raise ValueError(f"committer {self.committer!r} is not `Name <email>`: write it "
                             "as e.g. \"Squad Bot <squad@example.com>\", or leave it empty")
        if self.land_policy == "no-new-failures" and not self.land_check_report:
            raise ValueError("land_policy \"no-new-failures\" compares the failing tests of "
                             "main and the candidate: set land_check_report (a JUnit XML file "
                             "the check writes, e.g. \"{report}\") or use \"green\"")
        return self

    @property
    def policy(self) -> Literal["green", "no-new-failures"]:
        """`land_policy`, its default filled in: no-new-failures with a report, else green."""
        if self.land_policy:
            return self.land_policy
        return "no-new-failures" if self.land_check_report else "green"


class ClusterSettings(_Section):
    url: str = ""
    local_slots: int = Field(0, ge=0, le=4096)
    max_jobs: int = Field(256, ge=1, le=1_000_000)
    lease_s: float = Field(30.0, gt=0, le=86400)
    heartbeat_s: float = Field(5.0, gt=0, le=3600)
    request_timeout_s: float = Field(10.0, gt=0, le=3600)
    request_attempts: int = Field(30, ge=1, le=10_000)
    redis_down_s: float = Field(60.0, gt=0, le=86400)
    events_maxlen: int = Field(100_000, ge=100, le=100_000_000)
    reply_ttl_s: int = Field(86400, ge=60)

    @model_validator(mode="after")
    def _no_password_in_url(self) -> ClusterSettings:
        if self.url and not re.match(r"^rediss?://", self.url):
            raise ValueError(f"url {self.url!r} is not a Redis URL: expected "
                             "redis://HOST:PORT/DB (or rediss:// for TLS)")
        if re.match(r"^rediss?://[^/@]*:[^/@]*@", self.url):
            raise ValueError("the Redis URL carries a password: settings may live in .squad/, "
                             "which is committed; put the password in SQUADD_REDIS_PASSWORD "
                             "or a SQUADD_REDIS_PASSWORD= line of the secrets file instead")
        return self


class HooksSettings(_Section):
    import_claude: bool = False
    fail_closed: bool = False
    timeout_s: float = Field(60.0, gt=0, le=86400)
    max_output_bytes: int = Field(65536, ge=1024, le=16_777_216)


class TelemetrySettings(_Section):
    traces: Literal["auto", "on", "off"] = "auto"
    service_name: str = Field("squadd", min_length=1, max_length=256)
    capture_content: bool = False
    max_queue: int = Field(2048, ge=1, le=1_000_000)
    export_timeout_s: float = Field(10.0, gt=0, le=600)


class SandboxSettings(_Section):
    mode: Literal["auto", "bwrap", "landlock", "off"] = "auto"
    network: Literal["off", "on"] = "off"
    writable: list[str] = Field(default_factory=list)
    deny_read: list[str] = Field(default_factory=lambda: [
        "~/.ssh", "~/.gnupg", "~/.aws", "~/.config/gcloud", "~/.netrc",
        "~/.docker/config.json", "~/.config/squadd/secrets"])
    max_processes: int = Field(512, ge=8, le=1_000_000)
    max_file_mb: int = Field(4096, ge=1, le=1 << 30)


class PriceSettings(_Section):
    """One model's prices in US dollars per million tokens (`[pricing."PROVIDER/MODEL"]`)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(None, ge=0)
    """Cached prompt tokens read (None: priced as `input`)."""
    cache_write: float | None = Field(None, ge=0)
    """Prompt tokens written to the cache (None: priced as `input`)."""


class BudgetSettings(_Section):
    per_day_usd: float = Field(0.0, ge=0)
    per_agent_usd: float = Field(0.0, ge=0)
    per_route_usd: float = Field(0.0, ge=0)
    per_session_tokens: int = Field(0, ge=0)


class ApprovalsSettings(_Section):
    expire_after_s: float = Field(0.0, ge=0)
    on_expiry: Literal["deny", "escalate"] = "deny"


class NotifySettings(_Section):
    command: list[str] = Field(default_factory=list)
    webhook: str = ""
    timeout_s: float = Field(10.0, gt=0, le=600)
    attempts: int = Field(5, ge=1, le=100)
    backoff_s: float = Field(1.0, ge=0, le=3600)

    @model_validator(mode="after")
    def _webhook_is_http(self) -> NotifySettings:
        if self.webhook and not re.match(r"^https?://[^\s]+$", self.webhook):
            raise ValueError(f"webhook {self.webhook!r} is not an http(s) URL")
        return self


class AgentSettings(_Section):
    model: str = ""
    isolation: Isolation | None = None
    network: Literal["off", "on"] | None = None


class Settings(_Section):
    """Every setting squadd reads. `config/squadd.toml` documents each one."""

    limits: LimitsSettings = LimitsSettings()
    pool: PoolSettings = PoolSettings()
    route: RouteSettings = RouteSettings()
    session: SessionSettings = SessionSettings()
    prompt: PromptSettings = PromptSettings()
    provider: ProviderSettings = ProviderSettings()
    tools: ToolsSettings = ToolsSettings()
    workspace_tools: WorkspaceToolsSettings = WorkspaceToolsSettings()
    scribe: ScribeSettings = ScribeSettings()
    daemon: DaemonSettings = DaemonSettings()
    workspace: WorkspaceSettings = WorkspaceSettings()
    cluster: ClusterSettings = ClusterSettings()
    hooks: HooksSettings = HooksSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    sandbox: SandboxSettings = SandboxSettings()
    agents: dict[str, AgentSettings] = Field(default_factory=dict)
    variables: dict[str, str] = Field(default_factory=dict)
    pricing: dict[str, PriceSettings] = Field(default_factory=lambda: dict(shipped_pricing()))
    """Prices by "PROVIDER/MODEL" (e.g. "openai/gpt-4o"); the defaults are the shipped file's."""
    budget: BudgetSettings = BudgetSettings()
    approvals: ApprovalsSettings = ApprovalsSettings()
    notify: NotifySettings = NotifySettings()


_SECTIONS: dict[str, type[BaseModel]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}
_FREE_SECTIONS = {"agents", "variables", "pricing"}
_PRICED_MODEL = re.compile(r"^[A-Za-z0-9_.-]+/[^\s]+$")


def data_path(name: str) -> Path:
    """A folder shipped with squadd (`config` or `agents_template`), installed or in a checkout."""
    packaged = Path(str(resources.files("squadd"))) / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise ConfigError(f"squadd's bundled {name}/ folder is missing: reinstall squadd")


def default_config_file() -> Path:
    return data_path("config") / "squadd.toml"


_shipped_prices: dict[str, PriceSettings] | None = None


def shipped_pricing() -> dict[str, PriceSettings]:
    """The price tables of the shipped `config/squadd.toml`: the one place they are written
    (read once)."""
    global _shipped_prices
    if _shipped_prices is None:
        tables = _read_toml(default_config_file()).get("pricing", {})
        _shipped_prices = {model: PriceSettings.model_validate(prices)
                           for model, prices in tables.items()}
    return _shipped_prices


def user_config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "squadd" / "config.toml"


def _read_toml(path: Path) -> dict[str, Any]:
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


def _check_numbers(data: Mapping[str, Any], source: str) -> None:
    """Every number is finite and within `MAX_SETTING_NUMBER` (durations: seconds within
    `MAX_SETTING_SECONDS`); the error names the key and where it came from."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in data.items()]
    while stack:
        dotted, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((f"{dotted}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{dotted}.{i}", v) for i, v in enumerate(value))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            limit = MAX_SETTING_SECONDS if dotted.endswith("_s") else MAX_SETTING_NUMBER
            if isinstance(value, float) and not math.isfinite(value):
                problem = f"= {value} is not a finite number"
            elif abs(value) > limit:
                problem = (f"= {_shown_number(value)} is out of range: at most {limit:,}"
                           + (" seconds" if limit == MAX_SETTING_SECONDS else ""))
            else:
                continue
            raise ConfigError(f"{source}: '{dotted}' {problem}", key=dotted, source=source)


def _shown_number(value: float) -> str:
    if isinstance(value, float):
        return repr(value)
    digits = len(str(abs(value))) if value.bit_length() < 10_000 else 0
    return f"a number of {digits:,} digits" if digits > 24 or not digits else str(value)


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    for section, body in data.items():
        if section not in Settings.model_fields:
            known = ", ".join(sorted(Settings.model_fields))
            raise ConfigError(
                f"{source}: unknown section [{section}] (known sections: {known})",
                key=section, source=source,
            )
        if not isinstance(body, Mapping):
            raise ConfigError(
                f"{source}: [{section}] must be a table, got {type(body).__name__}",
                key=section, source=source,
            )
        if section in _FREE_SECTIONS:
            if section == "variables":
                for name in body:
                    if not _VARIABLE_NAME.fullmatch(name):
                        raise ConfigError(
                            f"{source}: 'variables.{name}': {name!r} is not a variable name "
                            f"(names match {_VARIABLE_NAME.pattern})", key=f"variables.{name}",
                            source=source)
            if section == "pricing":
                _check_pricing(body, source)
            if section == "agents":
                for agent, agent_body in body.items():
                    if not is_safe_name(agent):
                        raise ConfigError(
                            f"{source}: [agents.{agent}]: {agent!r} is not an agent name (names "
                            f"match {NAME_RULE})", key=f"agents.{agent}", source=source)
                    if not isinstance(agent_body, Mapping):
                        raise ConfigError(
                            f"{source}: [agents.{agent}] must be a table",
                            key=f"agents.{agent}", source=source,
                        )
                    for key in agent_body:
                        if key not in AgentSettings.model_fields:
                            raise ConfigError(
                                f"{source}: unknown key 'agents.{agent}.{key}' "
                                f"(known: {', '.join(AgentSettings.model_fields)})",
                                key=f"agents.{agent}.{key}", source=source,
                            )
            continue
        model = _SECTIONS[section]
        for key in body:
            if key not in model.model_fields:
                known = ", ".join(model.model_fields)
                raise ConfigError(
                    f"{source}: unknown key '{section}.{key}' (known keys in [{section}]: "
                    f"{known})",
                    key=f"{section}.{key}", source=source,
                )
    _check_text(data, source)
    _check_numbers(data, source)


def _check_pricing(body: Mapping[str, Any], source: str) -> None:
    for model, prices in body.items():
        if not _PRICED_MODEL.fullmatch(model):
            raise ConfigError(
                f"{source}: [pricing.\"{model}\"]: a price table is named \"PROVIDER/MODEL\" "
                "(e.g. [pricing.\"openai/gpt-4o\"])", key=f"pricing.{model}", source=source)
        if not isinstance(prices, Mapping):
            raise ConfigError(f"{source}: [pricing.\"{model}\"] must be a table",
                              key=f"pricing.{model}", source=source)
        for key in prices:
            if key not in PriceSettings.model_fields:
                raise ConfigError(
                    f"{source}: unknown key 'pricing.\"{model}\".{key}' (known: "
                    f"{', '.join(PriceSettings.model_fields)}, in US dollars per million "
                    "tokens)", key=f"pricing.{model}.{key}", source=source)


def _check_text(data: Mapping[str, Any], source: str) -> None:
    """No setting holds a NUL byte or text that is not valid UTF-8 (from the environment)."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in data.items()]
    while stack:
        dotted, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((f"{dotted}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{dotted}.{i}", v) for i, v in enumerate(value))
        for text in (value, dotted):
            bad = _BAD_TEXT.search(text) if isinstance(text, str) else None
            if bad is not None:
                what = "a NUL byte" if bad.group() == "\x00" else "text that is not UTF-8"
                raise ConfigError(f"{source}: '{_BAD_TEXT.sub('?', dotted)}' holds {what}",
                                  key=_BAD_TEXT.sub("?", dotted), source=source)


def _merge(base: dict[str, Any], layer: Mapping[str, Any], origin: dict[str, str],
           source: str) -> None:
    for section, body in layer.items():
        target = base.setdefault(section, {})
        for key, value in body.items():
            if section in ("agents", "pricing") and isinstance(value, Mapping):
                agent = target.setdefault(key, {})
                for sub, sub_value in value.items():
                    agent[sub] = sub_value
                    origin[f"{section}.{key}.{sub}"] = source
            else:
                target[key] = value
                origin[f"{section}.{key}"] = source


def _env_layer(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    layer: dict[str, dict[str, Any]] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX):].lower()
        section, _, key = rest.partition("_")
        if section not in _SECTIONS or not key:
            continue  # not a setting (other SQUADD_* variables are the user's own)
        if key not in _SECTIONS[section].model_fields:
            raise ConfigError(
                f"environment variable {name}: '{section}.{key}' is not a setting "
                f"(known keys in [{section}]: {', '.join(_SECTIONS[section].model_fields)})",
                key=f"{section}.{key}", source=name,
            )
        layer.setdefault(section, {})[key] = _parse_env_value(name, raw)
    return layer


def _parse_env_value(name: str, raw: str) -> Any:
    stripped = raw.strip()
    if stripped[:1] in "[{":
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return raw
        except ValueError:  # an integer of more digits than Python converts
            raise ConfigError(f"environment variable {name}: holds a number too large for any "
                              f"setting (at most {MAX_SETTING_NUMBER:,})", source=name) from None
        except RecursionError:
            raise ConfigError(f"environment variable {name}: nested too deeply",
                              source=name) from None
    return raw


def load_settings(
    squad_dir: Path | None = None,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
    user_file: Path | None = None,
) -> Settings:
    """Load settings through every layer; raise `ConfigError` naming the key and its file."""
    layers: list[tuple[str, dict[str, Any]]] = []
    default_file = default_config_file()
    layers.append((str(default_file), _read_toml(default_file)))
    user = user_file if user_file is not None else user_config_file()
    layers.append((str(user), _read_toml(user)))
    if squad_dir is not None:
        project = squad_dir / "config.toml"
        layers.append((str(project), _read_toml(project)))
    env = _env_layer(os.environ if environ is None else environ)
    layers.append(("environment", env))
    if overrides:
        layers.append(("command line", {k: dict(v) for k, v in overrides.items()}))

    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, data in layers:
        _check_keys(data, source)
        _merge(merged, data, origin, source)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise _explain(exc, merged, origin) from None
    # Again on the typed values: the environment's text ("1e400", "inf") becomes numbers here.
    dumped = settings.model_dump()
    try:
        _check_numbers(dumped, "settings")
    except ConfigError as exc:
        key = exc.key or ""
        raise ConfigError(str(exc).replace("settings:", _origin_of(tuple(key.split(".")),
                                                                     origin) + ":", 1),
                          key=key, source=_origin_of(tuple(key.split(".")), origin)) from None
    return settings


def _explain(exc: ValidationError, merged: Mapping[str, Any],
             origin: Mapping[str, str]) -> ConfigError:
    lines = []
    first_key = None
    first_source = None
    for error in exc.errors():
        dotted = ".".join(str(part) for part in error["loc"])
        value: Any = merged
        for part in error["loc"]:
            if isinstance(value, Mapping):
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                value = value[part]
            else:
                value = None
        source = _origin_of(error["loc"], origin)
        first_key = first_key or dotted
        first_source = first_source or source
        shown = _shown_number(value) if isinstance(value, int | float) else repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        lines.append(f"{source}: '{dotted}' = {shown} is invalid: {error['msg']}")
    return ConfigError("; ".join(lines), key=first_key, source=first_source)


def _origin_of(loc: tuple[int | str, ...], origin: Mapping[str, str]) -> str:
    """Where the setting at `loc` (or the setting it is part of: `tools.approvals.x`) came from."""
    for end in range(len(loc), 0, -1):
        source = origin.get(".".join(str(part) for part in loc[:end]))
        if source is not None:
            return source
    return "defaults"


# Settings that change while the daemon runs.
LIVE_SECTIONS = ("workspace", "tools", "scribe", "pool", "budget", "pricing")
"""The sections a running daemon applies when its settings files change (`squadd reload`,
SIGHUP, or the file watcher); a change anywhere else waits for a restart."""


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and dotted.count(".") < 2:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def changed_settings(running: Settings, loaded: Settings) -> list[str]:
    """The dotted keys (`provider.kind`, `agents.lead.model`) whose values differ, sorted."""
    old, new = _flatten(running.model_dump()), _flatten(loaded.model_dump())
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def is_live(key: str) -> bool:
    """Whether a change of the dotted `key` applies without a restart (`LIVE_SECTIONS`)."""
    return key.split(".", 1)[0] in LIVE_SECTIONS


def with_live_sections(running: Settings, loaded: Settings) -> Settings:
    """`running` with its live sections (`LIVE_SECTIONS`) taken from `loaded`: the settings a
    daemon runs with after a reload whose other changes wait for a restart."""
    return running.model_copy(update={name: getattr(loaded, name) for name in LIVE_SECTIONS})
