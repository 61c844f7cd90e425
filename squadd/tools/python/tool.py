"""Python tool files: the `tool` decorator (and its explicit form) and the `PythonTool` it makes.

``@tool`` turns a sync or async function into a tool whose argument schema comes from the
signature and the docstring (pydantic enforces defaults and constraints). A tool from a file
runs each call in a worker process (`calls`); in that process (or for a tool made in
code) sync functions run in a worker thread. Discovery gives each tool its final name (file
stem, or ``{stem}_{name}``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, overload

import anyio
import anyio.from_thread
import anyio.lowlevel
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from squadd.errors import ToolDefinitionError
from squadd.tools.base import Tool, ToolContext, ToolOutput, VariableSpec
from squadd.tools.naming import check_tool_name, default_label
from squadd.tools.python.calls import SpareWorkers, call_in_worker
from squadd.tools.python.docstrings import parse_docstring

if TYPE_CHECKING:
    from squadd.config import Settings

ToolFunction = Callable[..., Any]
VariableDecl = VariableSpec | Mapping[str, Any]


def _is_context(annotation: Any) -> bool:
    """`ToolContext`, or `ToolContext | None`."""
    if annotation is ToolContext:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return ToolContext in typing.get_args(annotation)
    return isinstance(annotation, str) and annotation.rsplit(".", 1)[-1].startswith(
        "ToolContext")


@dataclasses.dataclass(frozen=True)
class _Signature:
    model: type[BaseModel]
    fields: dict[str, str]
    """Model field -> the function's parameter name."""
    ctx_param: str | None
    summary: str


def signature_model(func: ToolFunction, model_name: str) -> _Signature:
    """Build the arguments model of `func` from its signature and docstring."""
    where = getattr(func, "__qualname__", repr(func))
    try:
        hints = typing.get_type_hints(func, include_extras=True)
        signature = inspect.signature(func)
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: cannot read its signature: {exc}") from exc
    summary, described = parse_docstring(inspect.getdoc(func))
    definitions: dict[str, Any] = {}
    fields: dict[str, str] = {}
    ctx_param: str | None = None
    for index, parameter in enumerate(signature.parameters.values()):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{where}: *{parameter.name} is not allowed in a tool: list every argument")
        annotation = hints.get(parameter.name, parameter.annotation)
        if _is_context(annotation) or (parameter.name in ("ctx", "context")
                                       and annotation is parameter.empty):
            ctx_param = parameter.name
            continue
        if annotation is parameter.empty:
            raise ToolDefinitionError(
                f"{where}: parameter {parameter.name!r} has no type annotation; the model "
                f"needs one (e.g. '{parameter.name}: str')")
        marker = Field(alias=parameter.name, title=default_label(parameter.name),
                       description=described.get(parameter.name))
        default = ... if parameter.default is parameter.empty else parameter.default
        internal = f"arg{index}"
        definitions[internal] = (Annotated[annotation, marker], default)
        fields[internal] = parameter.name
    try:
        model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **definitions)
        model.model_json_schema()
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: its arguments cannot be described: {exc}") from exc
    return _Signature(model, fields, ctx_param, summary)


def _variables(declared: Iterable[VariableDecl], where: str) -> tuple[VariableSpec, ...]:
    specs: list[VariableSpec] = []
    for item in declared:
        try:
            specs.append(item if isinstance(item, VariableSpec)
                         else VariableSpec.model_validate(dict(item)))
        except (ValidationError, TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"{where}: bad variable declaration {item!r}: {exc}") \
                from None
    return tuple(specs)


class PythonTool(Tool[BaseModel]):
    """A tool backed by a Python function (see `tool`)."""

    kind = "python"

    def __init__(self, *, func: ToolFunction, name: str, explicit_name: bool, label: str,
                 description: str, args_model: type[BaseModel], fields: dict[str, str] | None,
                 ctx_param: str | None, takes_ctx: bool, requires_approval: bool,
                 variables: tuple[VariableSpec, ...], timeout_s: float | None):
        self.func = func
        self.name = name
        self.explicit_name = explicit_name
        self.explicit_label = label
        self.label = label or default_label(name)
        self.given_description = description
        self.description = description or self.label
        self.args_model = args_model
        self.fields = fields
        """Model field -> parameter (decorator form); None: `execute(args[, ctx])` form."""
        self.ctx_param = ctx_param
        self.takes_ctx = takes_ctx
        self.requires_approval = requires_approval
        self.default_approval = "ask" if requires_approval else "allow"
        self.variables = variables
        self.timeout_s = timeout_s
        self.module: str = getattr(func, "__module__", "") or ""
        self.workers: SpareWorkers | None = None
        """The discoverer's spare worker processes, which calls from a file start from."""
        self.settings: Settings | None = None
        """The settings discovery loaded it with: its calls' sandbox comes from them."""
        self.function_name: str = getattr(func, "__name__", name)
        self.is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
            getattr(type(func), "__call__", None))  # noqa: B004 (an async callable object)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself (handy in the tool file's own tests)."""
        return self.func(*args, **kwargs)

    def bound(self, name: str, *, source: Any, file: Path | None) -> PythonTool:
        """A copy named and placed by discovery."""
        clone = copy.copy(self)
        clone.__dict__.pop("_spec", None)  # the cached spec carries the old name
        clone.name = name
        clone.label = self.explicit_label or default_label(name)
        clone.description = self.given_description or clone.label
        clone.source = source
        clone.file = file
        return clone

    async def run(self, args: BaseModel, ctx: ToolContext) -> ToolOutput:
        """A tool from a file runs in a worker process of its own (killed when the call ends,
        however it ends); one made in code (no file) runs here."""
        if self.file is not None:
            return await call_in_worker(self, args, ctx, self.workers)
        return await self.run_here(args, ctx)

    async def run_here(self, args: BaseModel, ctx: ToolContext) -> ToolOutput:
        """Run the function in this process: async ones on the loop, sync ones in a thread."""
        if self.is_async:
            result = await self._call(args, ctx)
        else:
            threaded = _thread_context(ctx)
            call = functools.partial(self._call_sync, args, threaded)
            result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        if inspect.isawaitable(result):
            result = await result
        return typing.cast(ToolOutput, result)

    def _arguments(self, args: BaseModel, ctx: ToolContext) -> tuple[list[Any], dict[str, Any]]:
        if self.fields is None:
            return ([args, ctx] if self.takes_ctx else [args]), {}
        kwargs = {param: getattr(args, field) for field, param in self.fields.items()}
        if self.ctx_param is not None:
            kwargs[self.ctx_param] = ctx
        return [], kwargs

    def _call(self, args: BaseModel, ctx: ToolContext) -> Awaitable[Any]:
        positional, kwargs = self._arguments(args, ctx)
        return typing.cast(Awaitable[Any], self.func(*positional, **kwargs))

    def _call_sync(self, args: BaseModel, ctx: ToolContext) -> Any:
        positional, kwargs = self._arguments(args, ctx)
        return self.func(*positional, **kwargs)


def _thread_context(ctx: ToolContext) -> ToolContext:
    """A context whose `progress` may be called from the worker thread a sync tool runs in."""
    report = ctx._progress
    if report is None:
        return ctx
    loop = anyio.lowlevel.current_token()

    def progress(message: str, fraction: float | None) -> None:
        anyio.from_thread.run_sync(report, message, fraction, token=loop)

    threaded = copy.copy(ctx)
    threaded._progress = progress
    return threaded


def _build(func: ToolFunction, *, name: str | None, label: str | None,
           description: str | None, args: type[BaseModel] | None, requires_approval: bool,
           variables: Iterable[VariableDecl], timeout_s: float | None) -> PythonTool:
    if not callable(func):
        raise ToolDefinitionError(f"tool(): execute must be a function, got {func!r}")
    where = getattr(func, "__qualname__", repr(func))
    if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
        raise ToolDefinitionError(f"{where}: a tool must return its result, not yield it")
    if name is not None:
        check_tool_name(name, where=where)
    if timeout_s is not None and not timeout_s > 0:
        raise ToolDefinitionError(f"{where}: timeout_s must be more than 0, got {timeout_s}")
    tool_name: str = name or str(getattr(func, "__name__", "tool"))
    specs = _variables(variables, where)
    if args is not None:
        if not (isinstance(args, type) and issubclass(args, BaseModel)):
            raise ToolDefinitionError(f"{where}: args must be a pydantic model class")
        positional = [p for p in inspect.signature(func).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if not 1 <= len(positional) <= 2:
            raise ToolDefinitionError(
                f"{where}: with args=Model, execute takes (args) or (args, ctx)")
        summary, _ = parse_docstring(inspect.getdoc(func))
        return PythonTool(
            func=func, name=tool_name, explicit_name=name is not None, label=label or "",
            description=description or summary, args_model=args,
            fields=None, ctx_param=None, takes_ctx=len(positional) == 2,
            requires_approval=requires_approval, variables=specs, timeout_s=timeout_s)
    shape = signature_model(func, f"{tool_name}_args")
    return PythonTool(
        func=func, name=tool_name, explicit_name=name is not None, label=label or "",
        description=description or shape.summary, args_model=shape.model, fields=shape.fields,
        ctx_param=shape.ctx_param, takes_ctx=shape.ctx_param is not None,
        requires_approval=requires_approval, variables=specs, timeout_s=timeout_s)


@overload
def tool(func: ToolFunction, /) -> PythonTool: ...


@overload
def tool(*, name: str | None = None, label: str | None = None, description: str | None = None,
         args: type[BaseModel] | None = None, execute: ToolFunction,
         requires_approval: bool = False, variables: Iterable[VariableDecl] = (),
         timeout_s: float | None = None) -> PythonTool: ...


@overload
def tool(*, name: str | None = None, label: str | None = None, description: str | None = None,
         args: type[BaseModel] | None = None, execute: None = None,
         requires_approval: bool = False, variables: Iterable[VariableDecl] = (),
         timeout_s: float | None = None) -> Callable[[ToolFunction], PythonTool]: ...


def tool(func: ToolFunction | None = None, /, *, name: str | None = None,
         label: str | None = None, description: str | None = None,
         args: type[BaseModel] | None = None, execute: ToolFunction | None = None,
         requires_approval: bool = False, variables: Iterable[VariableDecl] = (),
         timeout_s: float | None = None) -> PythonTool | Callable[[ToolFunction], PythonTool]:
    """Declare a tool.

    ``@tool`` / ``@tool(requires_approval=True, variables=[...])`` on a function, or the
    explicit form ``tool(name=..., label=..., description=..., args=Model, execute=fn)`` where
    `fn` takes ``(args)`` or ``(args, ctx)``. The function returns a str, a dict or a
    `ToolResult`; it may be sync (run in a worker thread) or async. The parameters become the
    arguments the model fills in, described by the docstring (Google, Sphinx or NumPy style):

        from squadd import ToolContext, tool

        @tool
        def greet(name: str, times: int = 1) -> str:
            \"\"\"Greet someone.

            Args:
                name: Who to greet.
                times: How many times, 1 to 5.
            \"\"\"
            return " ".join([f"Hello, {name}!"] * times)

        @tool(requires_approval=True, variables=[{"name": "API_TOKEN", "type": "secret"}])
        async def publish(version: str, ctx: ToolContext) -> str:
            \"\"\"Publish a release (asks the user first).\"\"\"
            ...
    """
    options: dict[str, Any] = dict(
        name=name, label=label, description=description, args=args,
        requires_approval=requires_approval, variables=tuple(variables), timeout_s=timeout_s)
    if func is not None:
        if execute is not None:
            raise ToolDefinitionError("tool(): give the function or execute=, not both")
        return _build(func, **options)
    if execute is not None:
        return _build(execute, **options)

    def decorate(function: ToolFunction) -> PythonTool:
        return _build(function, **options)

    return decorate
