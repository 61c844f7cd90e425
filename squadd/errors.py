"""Every exception squadd raises on purpose.

The tree (catch a branch to catch everything below it)::

    SquaddError                      anything squadd raised deliberately
    ├── ConfigError                  a setting is unknown or has a bad value (names key and file)
    │   └── HooksFileError           a hooks file that cannot be used (names file and place)
    ├── SquadNotFoundError           no .squad/ (or legacy .ai-team/) above the working directory
    ├── StateError                   the .squad/ filesystem refused an operation
    │   ├── InvalidNameError         an agent, skill or session name breaks the naming rule
    │   ├── PathEscapeError          a path resolves outside the squad dir
    │   ├── LimitExceededError       a body, learning or file is over its size limit
    │   ├── LockTimeoutError         a file lock was not acquired in time
    │   ├── NotFoundError            an agent, skill or session that does not exist
    │   └── NotUtf8Error             a .squad/ text file holds bytes that are not UTF-8
    ├── ProviderError                a model provider failed (names provider, status, its text)
    │   ├── ProviderTimeoutError     the provider did not answer in time
    │   └── RetryableStatusError     a 429 or 5xx answer: worth another try (`retry_after_s`)
    ├── RouteError                   a route could not be admitted or run
    │   └── PoolFullError            the admission queue is full (carries the numbers)
    ├── WorkspaceError               a git worktree step failed (names the command and its output)
    ├── SandboxError                 no sandbox the settings allow can run here
    ├── InboxError                   an inbox action that cannot be done (unknown item or action)
    ├── ClusterError                 the cluster cannot do what was asked (Redis gone past its
    │   │                            bound, a refused request; in `squadd.cluster.connection`)
    │   └── StaleLease               the coordinator refused a worker: the job moved on (in
    │                                `squadd.worker.session`)
    └── DaemonError                  talking to or running the daemon failed
        ├── DaemonNotRunningError    no daemon answers on the repo's socket
        ├── DaemonAlreadyRunningError  another daemon holds the repo's lock (names its PID)
        └── DaemonRequestError       the daemon answered with an error status (`status`, `payload`)

    ValueError                       (kept as bases: callers catch these by them)
    ├── ShellToolError               a YAML tool file that cannot be loaded (names file and key)
    ├── TemplateError                a command template that cannot be substituted safely
    ├── ConditionError               a run-condition that cannot be parsed (says where)
    ├── VariableValueError           a value `store_variable` refuses (never shows the value)
    ├── RichResultError              a tool result in the rich shape with a bad part (names it)
    └── UntrustedInputError          input from outside squadd cannot accept (says what and where)

    LookupError
    └── NotCached                    a cached read needs the file read again: do it off the loop

    Exception                        caught inside squadd and reported in its own words
    ├── ToolDefinitionError          a tool declared wrongly: its file's load failure
    ├── PathRefused                  a path a workspace tool will not touch (names rule and path)
    ├── VariablesMissing             a required variable has no value (says where to set it)
    ├── CallerError                  a call from outside names a session not there or not its
    ├── ApiError                     a daemon handler's refusal, answered as JSON with its status
    └── ChannelFailed                one try of one notification channel failed (retried)

Errors that reach a person say what happened, where, and what to do next. Errors that reach a
model are never exceptions: the tool pipeline turns them into failure ``ToolResult`` objects.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no `typing` at run time: `squadd status` imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


class SquaddError(Exception):
    """Base class of every error squadd raises on purpose."""


class ConfigError(SquaddError):
    """A setting is unknown or has a value of the wrong kind."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None):
        super().__init__(message)
        self.key = key
        self.source = source


class SquadNotFoundError(SquaddError):
    """No squad dir was found walking up from the working directory."""


class StateError(SquaddError):
    """The .squad/ filesystem layer refused an operation."""


class InvalidNameError(StateError):
    """A name does not match the naming rule."""


class PathEscapeError(StateError):
    """A path resolved outside the squad dir."""


class LimitExceededError(StateError):
    """Some input is larger than its configured limit."""


class LockTimeoutError(StateError):
    """A file lock could not be taken before the timeout."""


class NotFoundError(StateError):
    """An agent, skill or session does not exist."""


class NotUtf8Error(StateError):
    """A text file of the squad holds bytes that are not UTF-8 (names the file and offset)."""

    def __init__(self, message: str, *, path: str, offset: int):
        super().__init__(message)
        self.path = path
        self.offset = offset


class ProviderError(SquaddError):
    """A model provider failed; the message names the provider, status and its own text."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
    ):
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retryable = retryable


class ProviderTimeoutError(ProviderError):
    """The provider did not answer within its timeout."""


class RouteError(SquaddError):
    """A route could not be admitted or run."""


class PoolFullError(RouteError):
    """The pool's admission queue is full."""

    def __init__(self, message: str, *, running: int, queued: int, max_concurrent: int,
                 max_queued: int):
        super().__init__(message)
        self.running = running
        self.queued = queued
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued


class WorkspaceError(SquaddError):
    """A git step of a session's workspace (create, commit, land, remove) failed."""


class SandboxError(SquaddError):
    """No sandbox mechanism the settings allow can run here (or it failed to start)."""


class DaemonError(SquaddError):
    """Running or reaching the daemon failed."""


class DaemonNotRunningError(DaemonError):
    """No daemon answers on the repo's socket."""


class DaemonAlreadyRunningError(DaemonError):
    """Another daemon already serves this repo."""

    def __init__(self, message: str, *, pid: int | None):
        super().__init__(message)
        self.pid = pid


# client: the daemon's API, its clients and what they read
class DaemonRequestError(DaemonError):
    """The daemon answered with an error status; the message is the daemon's own."""

    def __init__(self, message: str, *, status: int, payload: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.payload: dict[str, Any] = dict(payload or {})


class ApiError(Exception):
    """Raised by one of the daemon's HTTP handlers: answered as `{"error": message, **fields}`
    with `status`."""

    def __init__(self, status: int, message: str, **fields: Any):
        super().__init__(message)
        self.status = status
        self.fields = fields


class ChannelFailed(Exception):
    """One try of one notification channel did not get through (retried)."""


class RetryableStatusError(ProviderError):
    """A 429 or 5xx answer: worth another attempt, no sooner than `retry_after_s` if it is set."""

    def __init__(self, message: str, *, provider: str, status: int,
                 retry_after_s: float | None = None):
        super().__init__(message, provider=provider, status=status, retryable=True)
        self.retry_after_s = retry_after_s


# --- tools: custom tool files (YAML and Python), their variables, hooks ---------------------
# These keep their historical bases (ValueError, Exception): callers catch them by those.


class ToolDefinitionError(Exception):
    """A tool is declared wrongly; discovery reports it as the load failure of its file."""


class ShellToolError(ValueError):
    """A YAML tool file that cannot be loaded; the message names the file and the key."""


class TemplateError(ValueError):
    """A command template that cannot be substituted safely (the message says why)."""


class ConditionError(ValueError):
    """A run-condition that cannot be parsed (the message says where)."""


class VariablesMissing(Exception):
    """Raised by a resolver when a required variable has no value (message says where to set it)."""

    def __init__(self, message: str, missing: tuple[Any, ...] = ()):
        super().__init__(message)
        self.missing = missing
        """The declarations (`VariableSpec`) without a value (empty when the resolver does not
        say)."""


class VariableValueError(ValueError):
    """A value `store_variable` refuses; the message never shows the value."""


class HooksFileError(ConfigError):
    """A hooks file that cannot be used (names the file and the place in it)."""


# --- runtime: session opening, callers, inbox (squadd.runtime, squadd.statcache) ------------


class NotCached(LookupError):
    """What was asked for needs a file read (it changed, or was never loaded): do it off the
    event loop (`StatCache.peek`; a session's opening then reads in a worker thread)."""


class CallerError(Exception):
    """A call from outside a session's loop names a session that does not exist, or one that
    belongs to another agent (`status`: the HTTP status to answer with)."""

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status


class InboxError(SquaddError):
    """An inbox action that cannot be done (an unknown item, an action it does not take)."""


class UntrustedInputError(ValueError):
    """Input from outside squadd cannot accept; the message says what was wrong and where."""


# --- cluster: Redis, the coordinator and its workers (squadd.cluster, squadd.worker) --------


class ClusterError(SquaddError):
    """The cluster cannot do what was asked (Redis gone past its bound, a refused request)."""


class StaleLease(ClusterError):
    """The coordinator refused this worker's request: the session's job moved on (or was
    cancelled). The worker stops the session and leaves its job alone."""


# --- tools: built-in workspace tools and rich results (squadd.tools.builtin, .rich) ----------


class PathRefused(Exception):
    """A path a workspace tool will not touch; the message names the rule and the path."""


class RichResultError(ValueError):
    """A result in the rich shape with a bad part; the message names the part."""
