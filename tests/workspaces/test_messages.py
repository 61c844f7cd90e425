"""The landed commit's message: a subject of at most 72 characters from the answer (or the
agent's `commit_message:` line), the task and a summary in the body, and the trailers."""

from __future__ import annotations

from squadd.workspaces.messages import commit_message, parse_identity, subject


def test_the_subject_is_the_answers_first_line_cut_at_a_word_within_72_chars() -> None:
    long = "Fixed the overflow in parse_duration when the input carries more than " \
           "nine digits of nanoseconds"
    cut = subject(long)
    assert len(cut) <= 72 and cut.endswith("…")
    assert long.startswith(cut[:-1]) and long[len(cut) - 1] == " "  # cut between words
    assert subject("## Done: fixed it\n\nmore") == "Done: fixed it"
    assert subject("\n\n- Fixed add\n") == "Fixed add"


def test_the_message_has_subject_task_summary_and_trailers() -> None:
    message = commit_message(task="make   the failing\ntest pass",
                             answer="Fixed calc.add.\n\nIt returned a - b; now a + b.",
                             session_id="20260101-000000-0000c0de", agent="fenster")
    assert message == ("Fixed calc.add.\n\nTask: make the failing test pass\n\n"
                       "It returned a - b; now a + b.\n\n"
                       "Squad-Session: 20260101-000000-0000c0de\nSquad-Agent: fenster\n")


def test_the_agent_names_its_subject_with_a_commit_message_line() -> None:
    message = commit_message(task="t", answer="All done, tests green.\n"
                                              "commit_message: Handle empty input in split()",
                             session_id="s1", agent="lead")
    assert message.splitlines()[0] == "Handle empty input in split()"
    assert "commit_message:" not in message


def test_without_an_answer_the_subject_comes_from_the_task() -> None:
    assert commit_message(task="Write the greeting", answer="", session_id="s", agent="a"
                          ).splitlines()[0] == "Write the greeting"


def test_an_identity_is_name_and_email() -> None:
    assert parse_identity("Squad Bot <bot@example.com>") == ("Squad Bot", "bot@example.com")
    assert parse_identity("no email") is None
