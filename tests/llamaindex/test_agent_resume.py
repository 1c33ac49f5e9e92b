"""A paused agent run continued from its serialised ``Context`` in a new process.

The human-in-the-loop pattern of LlamaIndex's agents: a tool waits for a person
(``InputRequiredEvent``), the application saves ``ctx.to_dict()`` and stops; later, another
process restores the context, sends the answer and the run finishes. The serialised context
records where the HarombeMemory is, so the resumed run has the whole conversation: the model
is sent the question, its own tool call and the tool's result, and every message is stored
once. (LlamaIndex's own ``Memory`` is not carried by a serialised context: restored in a new
process the run has no memory.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llamaindex.agent_resume import AGENTS, pause
from tests.llamaindex.engine_turn import in_new_process

SCRIPT = Path(__file__).with_name("agent_resume.py")


@pytest.mark.parametrize(
    ("kind", "ser"), [*((kind, "json") for kind in AGENTS), ("function", "pickle")]
)
async def test_a_paused_run_finishes_in_a_new_process_with_its_history(
    tmp_path: Path, kind: str, ser: str
) -> None:
    db, path = str(tmp_path / "memory.db"), str(tmp_path / "ctx.json")
    await pause(db=db, kind=kind, ser=ser, path=path)
    result = in_new_process(SCRIPT, {"kind": kind, "ser": ser, "path": path})
    sent, stored = result["sent"], result["stored"]
    assert ["user", "Book me a trip."] in sent
    assert stored[0] == ["user", "Book me a trip."]
    assert [role for role, _ in stored].count("user") == 1
    if kind == "react":  # the reasoning, with the tool's observation, as one message
        assert "Observation: booked Lisbon" in sent[-1][1]
        assert result["reply"] == "Done."
        assert [role for role, _ in stored] == ["user", "assistant"]
        assert "Observation: booked Lisbon" in stored[1][1]
    else:  # the tool call, its result and the answer
        assert sent[-1] == ["tool", "booked Lisbon"]
        assert result["reply"] == "Done: booked Lisbon."
        assert [role for role, _ in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[-1] == ["assistant", "Done: booked Lisbon."]
