"""The typed settings: one frozen pydantic model per section, `Settings` holding them all, and the
shipped price tables its `pricing` defaults to.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from squadd.config.files import default_config_file, read_toml
from squadd.contracts.workspaces import Isolation


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


_shipped_prices: dict[str, PriceSettings] | None = None


def shipped_pricing() -> dict[str, PriceSettings]:
    """The price tables of the shipped `config/squadd.toml`: the one place they are written
    (read once)."""
    global _shipped_prices
    if _shipped_prices is None:
        tables = read_toml(default_config_file()).get("pricing", {})
        _shipped_prices = {model: PriceSettings.model_validate(prices)
                           for model, prices in tables.items()}
    return _shipped_prices

