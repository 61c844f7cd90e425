"""The launcher a command runs under without bubblewrap: Landlock rules, limits, and a reaper.

`python -I -S launcher.py OPTIONS -- ARGV...` (standard library only, no json even, so it starts
fast and needs no import path; `encode` writes the OPTIONS). It joins the call's pids cgroup
when there is one, becomes a child subreaper, and forks: the child sets the limits, applies the
Landlock rules (through the kernel's syscalls: no dependency) and execs ARGV. Whatever ARGV
leaves behind (`setsid`, double forks, `env -i`) is reparented to the launcher, which kills it
when ARGV exits, or at once on SIGTERM; then it exits with ARGV's status. Imported, it answers
`abi()` for the checks.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
from typing import Any

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every arch
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE = 1 << 4, 1 << 5
MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (
    1 << 6, 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12)
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
MAKE = MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM
WRITE = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE | REFER | TRUNCATE


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args: Any) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    try:
        return _syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(CREATE_RULESET_VERSION))
    except OSError:
        return 0


def fs_rights(version: int) -> int:
    """Every filesystem right this ABI version handles."""
    rights = READ | WRITE & ~(REFER | TRUNCATE)
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def restrict(spec: dict[str, Any]) -> None:
    """Apply `spec`'s rules to this process (and everything it starts): `read` and `write`
    lists of paths (with their `file` flag), `network` allowed or not."""
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available in this kernel")
    handled = fs_rights(version)
    attr = _RulesetAttr(handled, 0, 0)
    size = ctypes.sizeof(_RulesetAttr)
    if version < 4:
        size = 8
    elif version < 6:
        size = 16
    if version >= 4 and not spec.get("network"):
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if version >= 6:
        attr.scoped = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX
    ruleset = _syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                       ctypes.c_uint32(0))
    try:
        for rights, entries in ((READ, spec.get("read", [])),
                                (READ | WRITE, spec.get("write", [])),
                                (READ | WRITE_FILE | IOCTL_DEV, spec.get("devices", []))):
            for path, is_file in entries:
                _add_path(ruleset, path, rights & handled & (FILE_ONLY if is_file else ~0))
        os.set_inheritable(ruleset, False)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _syscall(SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _add_path(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone meanwhile: nothing to allow
    try:
        rule = _PathBeneath(rights, fd)
        _syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def _children_of(parent: int) -> dict[int, list[int]]:
    """Every process's children, by parent pid (read from /proc)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):  # noqa: PTH208 (no pathlib: the launcher starts fast)
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 1:
            tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def sweep(me: int) -> None:
    """SIGKILL every descendant of `me` and reap them, until none is left.

    Only children this pass killed are waited for: a process forked after the scan (a fork
    bomb's) is not waited on, which could last as long as it likes, but found and killed on
    the next pass."""
    while True:
        tree = _children_of(me)
        stack, found = list(tree.get(me, [])), []
        while stack:
            pid = stack.pop()
            found.append(pid)
            stack.extend(tree.get(pid, []))
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in tree.get(me, []):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            if not found:
                return


def _limits(spec: dict[str, Any]) -> None:
    for name, value in (("RLIMIT_FSIZE", spec.get("fsize")), ("RLIMIT_NPROC", spec.get("nproc"))):
        if value:
            limit = getattr(resource, name)
            _, hard = resource.getrlimit(limit)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))


class _Stop(Exception):
    """SIGTERM: the call is being stopped."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


_LISTS = {"--read": ("read", False), "--read-file": ("read", True),
          "--write": ("write", False), "--write-file": ("write", True),
          "--device": ("devices", False)}
_VALUES = {"--cgroup": "cgroup", "--fsize": "fsize", "--nproc": "nproc"}


def encode(spec: dict[str, Any]) -> list[str]:
    """The launcher's options for `spec` (what `decode` reads back)."""
    out: list[str] = []
    for flag, key in _VALUES.items():
        if spec.get(key):
            out += [flag, str(spec[key])]
    rules = spec.get("landlock")
    if rules is not None:
        out.append("--landlock")
        if rules.get("network"):
            out.append("--network")
        for flag, (key, is_file) in _LISTS.items():
            for path, file_rule in rules.get(key, []):
                if bool(file_rule) == is_file:
                    out += [flag, path]
    return [*out, "--"]


def decode(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The spec and the command from the launcher's arguments."""
    spec: dict[str, Any] = {}
    rules: dict[str, Any] = {"read": [], "write": [], "devices": [], "network": False}
    index = 0
    while argv[index] != "--":
        flag = argv[index]
        if flag == "--landlock":
            spec["landlock"] = rules
        elif flag == "--network":
            rules["network"] = True
        elif flag in _LISTS:
            key, is_file = _LISTS[flag]
            index += 1
            rules[key].append((argv[index], is_file))
        else:
            index += 1
            value = argv[index]
            spec[_VALUES[flag]] = value if flag == "--cgroup" else int(value)
        index += 1
    return spec, argv[index + 1:]


def main(argv: list[str]) -> int:
    spec, command = decode(argv[1:])
    if spec.get("cgroup"):
        with open(spec["cgroup"], "w", encoding="ascii") as handle:
            handle.write(str(os.getpid()))
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGTERM, _stop)
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            _limits(spec)
            if spec.get("landlock") is not None:
                restrict(spec["landlock"])
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"squadd sandbox: cannot run {command[0]}: {exc}\n".encode())
        os._exit(127)
    status = 128 + signal.SIGTERM
    try:
        while True:
            pid, code = os.waitpid(-1, 0)
            if pid == child:
                status = os.waitstatus_to_exitcode(code)
                break
    except (_Stop, ChildProcessError):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sweep(os.getpid())
    return status if status >= 0 else 128 - status

if __name__ == "__main__":
    sys.exit(main(sys.argv))
