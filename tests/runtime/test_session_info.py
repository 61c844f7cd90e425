"""Session identity: ids are unique, also between a process and the children it forks."""

from __future__ import annotations

import os
import re

from squadd.runtime.session import new_message_id
from squadd.runtime.session_info import new_session_id
from squadd.state.layout import safe_id


def test_ids_have_their_shape_and_never_repeat() -> None:
    ids = {new_session_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}", sid) and safe_id(sid) == sid
               for sid in ids)
    assert len({new_message_id() for _ in range(2000)}) == 2000


def test_a_forked_child_makes_other_ids_than_its_parent() -> None:
    # The random bits come from a generator a fork copies: it must be seeded again in the
    # child, or a daemon's forked helper would hand out its parent's next ids.
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.write(write, ",".join(new_session_id() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        got = os.read(read, 4096).decode().split(",")
    finally:
        os.close(read)
        os.waitpid(child, 0)
    mine = [new_session_id() for _ in range(5)]
    assert {sid[-8:] for sid in got}.isdisjoint(sid[-8:] for sid in mine)
