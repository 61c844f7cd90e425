"""A reading of a bash template good enough to judge where each `{PARAM}` lands.

`scan` walks the text once, tracking quotes, `${...}`, `$(...)`, arithmetic, `[[ ... ]]`,
redirections and simple commands, and returns every placeholder with its context and its
word, the simple commands (as words), and the constructs that make bash evaluate a value as
code (arithmetic, `eval`, subscripts, ...). `template` decides what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
ASSIGNMENT_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
_SPACE = " \t"
_COMMAND_FRAMES = ("top", "cmdsub", "backtick", "subshell", "list")
_OPERATOR_CHARS = ";&|()<>\n"
KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until",
                      "esac", "function", "time", "!", "{", "}", "in"})
"""Words that start a new command when they stand where a command name would."""


@dataclass(eq=False)
class Word:
    start: int
    end: int = -1
    redirect: bool = False
    """The target of a redirection (`> file`), not an argument."""
    list_item: bool = False
    """An element of a compound assignment `name=( ... )`."""
    text: str = ""
    fd: bool = False
    """Read as a file descriptor: the target of `>&`/`<&`, or written against a redirection
    operator (`{X}>file`)."""
    position: int = -1
    """Index among its command's `arguments()` (-1 for redirections and list items)."""

    @property
    def literal(self) -> str:
        """The word with quote characters removed (good enough to recognise `-c`, `sh`)."""
        return self.text.replace("'", "").replace('"', "").replace("\\", "")


@dataclass(eq=False)
class Command:
    words: list[Word] = field(default_factory=list)
    dbracket: bool = False
    _arguments: list[Word] = field(default_factory=list)
    _name_at: int | None = None

    def add(self, word: Word) -> None:
        self.words.append(word)
        if word.redirect or word.list_item:
            return
        word.position = len(self._arguments)
        self._arguments.append(word)
        if self._name_at is None and not ASSIGNMENT_RE.match(word.literal):
            self._name_at = word.position

    def arguments(self) -> list[Word]:
        """The words that are not redirections or list items, in order (do not modify)."""
        return self._arguments

    def name_index(self) -> int | None:
        """Index (in `arguments()`) of the command name: the first word that is not an
        assignment."""
        return self._name_at


@dataclass(eq=False)
class Hit:
    name: str
    start: int
    end: int
    context: str
    """`command` where the shell reads a quoted word; else dq, sq, ansi, param, arith,
    heredoc or backtick."""
    command: Command | None = None
    word: Word | None = None


@dataclass
class Scan:
    hits: list[Hit]
    commands: list[Command]
    constructs: list[tuple[str, int]]
    """(what, offset) for every place bash evaluates text as code or arithmetic."""


@dataclass(eq=False)
class _Frame:
    kind: str
    depth: int = 0
    command: Command = field(default_factory=Command)
    word: Word | None = None
    redirect_next: bool = False
    fd_next: bool = False


class _Scanner:
    def __init__(self, text: str, params: Collection[str]):
        self.text = text
        self.params = params
        self.hits: list[Hit] = []
        self.commands: list[Command] = []
        self.constructs: list[tuple[str, int]] = []
        self.stack: list[_Frame] = [_Frame("top")]
        self.heredoc = False

    # -- the nearest command frame: words and simple commands -------------------------------
    def _command_frame(self) -> _Frame:
        for frame in reversed(self.stack):
            if frame.kind in ("top", "cmdsub", "backtick", "subshell", "list"):
                return frame
        return self.stack[0]

    def _touch_word(self, at: int) -> Word:
        frame = self._command_frame()
        if frame.word is None:
            frame.word = Word(at, redirect=frame.redirect_next, list_item=frame.kind == "list",
                              fd=frame.fd_next)
            frame.redirect_next = frame.fd_next = False
        return frame.word

    def _end_word(self, frame: _Frame, at: int) -> None:
        word = frame.word
        if word is None:
            return
        frame.word = None
        word.end = at
        word.text = self.text[word.start:at]
        command = frame.command
        if (not word.redirect and not word.list_item and command.name_index() is None
                and word.literal in KEYWORDS and word.text == word.literal):
            self._end_command(frame)
            return
        command.add(word)
        if word.fd and word.redirect and ("$" in word.text or "`" in word.text):
            self.constructs.append((f"a file descriptor taken from an expansion ({word.text})",
                                    word.start))
        if word.literal == "[[" and command.name_index() == len(command.arguments()) - 1:
            command.dbracket = True
        elif word.literal == "]]" and command.dbracket:
            command.dbracket = False

    def _end_command(self, frame: _Frame) -> None:
        if frame.command.words:
            self.commands.append(frame.command)
        frame.command = Command()

    def _at_command_start(self, frame: _Frame) -> bool:
        words = frame.command.arguments()
        return frame.word is None and (frame.command.name_index() is None
                                       or (len(words) == 1 and words[0].literal == "for"))

    # -- the walk ------------------------------------------------------------------------------
    def run(self) -> Scan:
        text, size, i = self.text, len(self.text), 0
        while i < size:
            i = self._step(i, text[i], text[i + 1] if i + 1 < size else "")
        for frame in self.stack:
            if frame.kind in ("top", "cmdsub", "backtick", "subshell", "list"):
                self._end_word(frame, size)
                self._end_command(frame)
        return Scan(self.hits, self.commands, self.constructs)

    def _step(self, i: int, c: str, nxt: str) -> int:
        text = self.text
        frame = self.stack[-1]
        kind = frame.kind
        if c == "{":
            match = PLACEHOLDER_RE.match(text, i)
            if match and match.group(1) in self.params:
                return self._hit(match, frame)
        if kind in ("sq", "ansi"):
            if c == "\\" and kind == "ansi":
                return i + 2
            if c == "'":
                self.stack.pop()
            return i + 1
        if kind in _COMMAND_FRAMES and c not in " \t\n" and (
                frame.command.dbracket or c not in _OPERATOR_CHARS):
            self._touch_word(i)
        if c == "\\":
            return i + 2
        if c == "$" and nxt == "{":
            inner = PLACEHOLDER_RE.match(text, i + 1)
            if inner and inner.group(1) in self.params:
                from squadd.errors import TemplateError
                raise TemplateError(
                    f"${{{inner.group(1)}}} reads a shell variable, not the parameter: write "
                    f"{{{inner.group(1)}}} (squadd substitutes and quotes it)")
            self._parameter_construct(i + 2)
            self.stack.append(_Frame("param"))
            return i + 2
        if c == "$" and text.startswith("((", i + 1):
            self.constructs.append(("$((...))", i))
            self.stack.append(_Frame("arith"))
            return i + 3
        if c == "$" and nxt == "[":
            self.constructs.append(("$[...]", i))
            self.stack.append(_Frame("sqarith"))
            return i + 2
        if c == "$" and nxt == "(":
            self.stack.append(_Frame("cmdsub"))
            return i + 2
        if c == "`":
            if kind == "backtick":
                self._close_command_frame(i)
            else:
                self.stack.append(_Frame("backtick"))
            return i + 1
        if kind == "dq":
            if c == '"':
                self.stack.pop()
            return i + 1
        if kind == "param":
            if c == "}":
                self.stack.pop()
            elif c in "'\"":
                self.stack.append(_Frame("sq" if c == "'" else "dq"))
            return i + 1
        if kind in ("arith", "sqarith"):
            return self._arith(i, c, nxt, frame)
        return self._command_char(i, c, nxt, frame)

    def _hit(self, match: re.Match[str], frame: _Frame) -> int:
        kind = frame.kind
        context = kind
        word: Word | None = None
        command: Command | None = None
        if kind in ("top", "cmdsub", "subshell", "list"):
            context = "heredoc" if self.heredoc else "command"
            word = self._touch_word(match.start())
            command = self._command_frame().command
        elif kind == "sqarith":
            context = "arith"
        elif kind == "dq":
            context = self._dq_context()
            if context == "dq":
                word = self._touch_word(match.start())
                command = self._command_frame().command
        self.hits.append(Hit(match.group(1), match.start(), match.end(), context, command, word))
        return match.end()

    def _dq_context(self) -> str:
        """Where a placeholder inside "..." stands: plain double quotes ("dq") within a
        command (or a `${...}` of one), unless backticks, a heredoc or arithmetic enclose
        them (backticks undo a level of backslashes, a heredoc keeps them)."""
        if self.heredoc:
            return "heredoc"
        if any(frame.kind == "backtick" for frame in self.stack):
            return "backtick"
        for frame in reversed(self.stack):
            if frame.kind in ("arith", "sqarith"):
                return "arith"
            if frame.kind in _COMMAND_FRAMES:
                return "dq"
        return "dq"

    def _parameter_construct(self, at: int) -> None:
        """`${a[i]}` and `${s:offset}` evaluate arithmetic on what they read."""
        match = re.compile(r"[#!]?([A-Za-z_][A-Za-z0-9_]*|[0-9@*])").match(self.text, at)
        if match is None:
            return
        rest = self.text[match.end():match.end() + 3]
        indirect = match.group(0).startswith("!") and not (
            rest[:3] in ("[@]", "[*]") or rest[:1] in ("*", "@"))
        if indirect or rest.startswith("@P") or self.text.startswith(("[@]@P", "[*]@P"),
                                                                       match.end()):
            self.constructs.append((f"an indirection ${{{match.group(0)}...}}", at - 2))
        elif rest.startswith("[") and rest[1:3] not in ("@]", "*]"):
            self.constructs.append(("an array subscript ${name[...]}", at - 2))
        elif rest.startswith(":") and rest[1:2] not in ("-", "=", "+", "?"):
            self.constructs.append(("a substring ${name:offset}", at - 2))

    def _arith(self, i: int, c: str, nxt: str, frame: _Frame) -> int:
        if frame.kind == "sqarith":
            if c == "[":
                frame.depth += 1
            elif c == "]":
                if frame.depth == 0:
                    self.stack.pop()
                else:
                    frame.depth -= 1
            return i + 1
        if c == "(":
            frame.depth += 1
        elif c == ")":
            if frame.depth == 0 and nxt == ")":
                self.stack.pop()
                return i + 2
            frame.depth -= 1
        return i + 1

    def _close_command_frame(self, i: int) -> None:
        frame = self.stack.pop()
        self._end_word(frame, i)
        self._end_command(frame)

    def _command_char(self, i: int, c: str, nxt: str, frame: _Frame) -> int:
        text = self.text
        if c == "$" and nxt == "'":
            self.stack.append(_Frame("ansi"))
            return i + 2
        if c == "$" and nxt == '"':
            self.stack.append(_Frame("dq"))
            return i + 2
        if c == "'":
            self.stack.append(_Frame("sq"))
            return i + 1
        if c == '"':
            self.stack.append(_Frame("dq"))
            return i + 1
        if c == "#" and (frame.word is None or frame.word.start == i):
            if frame.word is not None and frame.word.start == i:
                frame.word = None
            end = text.find("\n", i)
            return len(text) if end < 0 else end
        if frame.command.dbracket:
            after = text[i + 2:i + 3]
            if (frame.word is not None and frame.word.start == i and text.startswith("]]", i)
                    and after in ("", " ", "\t", "\n", ";", "&", "|", ")")):
                self._end_word(frame, i + 2)  # `]]` ends the test; what follows is bash again
                return i + 2
            if c in _SPACE or c == "\n":
                self._end_word(frame, i)
            return i + 1
        if c in _SPACE:
            self._end_word(frame, i)
            return i + 1
        if c == "(" and nxt == "(" and self._at_command_start(frame):
            self.constructs.append(("((...))", i))
            self.stack.append(_Frame("arith"))
            return i + 2
        if c in "<>" and nxt == "(":
            self._end_word(frame, i)
            self.stack.append(_Frame("cmdsub"))
            return i + 2
        if c in "<>" or (c == "&" and nxt == ">"):
            return self._redirect(i, frame)
        if c == "(":
            if frame.word is not None and text[frame.word.start:i].endswith("="):
                self.stack.append(_Frame("list"))
                return i + 1
            self._end_word(frame, i)
            self._end_command(frame)
            self.stack.append(_Frame("subshell"))
            return i + 1
        if c == ")":
            if frame.kind in ("cmdsub", "subshell", "list"):
                self._close_command_frame(i)
            else:
                self._end_word(frame, i)
                self._end_command(frame)
            return i + 1
        if c in ";&|\n":
            self._end_word(frame, i)
            self._end_command(frame)
            return i + 1
        return i + 1

    def _redirect(self, i: int, frame: _Frame) -> int:
        text = self.text
        word = frame.word
        if word is not None and text[word.start:i].isdigit():
            frame.word = None  # the file descriptor of `2>file`
        else:
            if word is not None:
                word.fd = True  # `{X}>file`: written where bash looks for a descriptor
            self._end_word(frame, i)
        if text.startswith("<<<", i):
            frame.redirect_next = True
            return i + 3
        if text.startswith("<<", i):
            self.heredoc = True
            return i + 2
        j = i + 1
        while j < len(text) and text[j] in "<>&|":
            j += 1
        frame.redirect_next = True
        frame.fd_next = text[i:j] in (">&", "<&")  # `>&WORD`: WORD is read as a descriptor
        return j


def scan(text: str, params: Collection[str]) -> Scan:
    """Read `text` as bash and report where the placeholders of `params` land."""
    return _Scanner(text, params).run()


def scan_words(words: list[str], params: Collection[str]) -> Scan:
    """The same report for a `run` command, already split into words (no shell reads it)."""
    command = Command()
    hits: list[Hit] = []
    offset = 0
    for text in words:
        word = Word(offset, offset + len(text), text=text)
        command.add(word)
        for match in PLACEHOLDER_RE.finditer(text):
            if match.group(1) in params:
                hits.append(Hit(match.group(1), offset + match.start(), offset + match.end(),
                                "command", command, word))
        offset += len(text) + 1
    return Scan(hits, [command], [])
