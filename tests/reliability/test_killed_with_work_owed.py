"""A process killed while every kind of derived work is still owed loses nothing it
acknowledged, and the next open derives it all again.

One process writes through a LangChain history, a LangGraph store, an agent checkpointed by
``HarombeSaver``, a LlamaIndex chat store and a ``HarombeMemory``, all on one file, with the
background worker held (``hold_background``): when it is killed, the keyword index, the
embeddings and the checkpointed thread's session are all still owed. The next process opens
the file with a saver (which re-derives owed sessions) and, once ``flush()`` returns, finds
every acknowledged message by its words and by its meaning, and the thread's session holds
exactly its newest checkpoint's messages.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harombe_core import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeSaver, HarombeStore

pytestmark = pytest.mark.slow

_WRITER = """
import itertools, json, sys, time
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.base.llms.types import ChatMessage
from harombe_core import MemoryManager
from harombe_core.testing import FakeEmbedder, hold_background
from langchain_harombe import HarombeChatMessageHistory, HarombeSaver, HarombeStore
from llamaindex_harombe import HarombeChatStore, HarombeMemory

mm = MemoryManager(sys.argv[1], embedding=FakeEmbedder())  # never closed
history = HarombeChatMessageHistory(session_id="history", manager=mm)
store = HarombeStore(mm, index={"embed": FakeEmbedder(), "fields": ["text"]})
replies = (AIMessage(f"reply {n}") for n in itertools.count())
agent = create_agent(GenericFakeChatModel(messages=replies), [], checkpointer=HarombeSaver(mm))
chat = HarombeChatStore(manager=mm)
memory = HarombeMemory.from_defaults(manager=mm, session_id="memory")

def ack(kind, key, word):
    print(json.dumps([kind, key, word]), flush=True)

with hold_background():
    for i in range(3):
        word = f"zqword{i}k"
        history.add_messages([HumanMessage(f"history {word}")])
        ack("message", "history", word)
        store.put(("notes",), f"n{i}", {"text": f"note {word}"})
        ack("item", f"n{i}", word)
        chat.add_message("chat", ChatMessage(role="user", content=f"chat {word}"))
        ack("message", "chat", word)
        memory.put(ChatMessage(role="user", content=f"memory {word}"))
        ack("message", "memory", word)
    for i in range(3):  # last: any read of the file writes the session a turn owes
        word = f"zqturn{i}k"
        agent.invoke({"messages": [HumanMessage(f"turn {word}")]},
                     {"configurable": {"thread_id": "thread"}})
        ack("message", "thread", word)
    print("held", flush=True)
    time.sleep(3600)
"""


def test_everything_owed_at_a_kill_is_derived_again(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, db], stdout=subprocess.PIPE, text=True, env=env
    )
    acks = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == "held":
                break
            acks.append(json.loads(line))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(acks) == 15, "the writer stopped before it was held"
    with sqlite3.connect(db) as raw:  # what the killed process owed
        assert raw.execute("SELECT thread_id FROM checkpoint_mirror_due").fetchall() == [
            ("thread",)
        ]
        assert raw.execute("SELECT COUNT(*) FROM messages WHERE embedded = 0").fetchone()[0]
    raw.close()

    with MemoryManager(db, embedding=FakeEmbedder()) as mm:
        saver = HarombeSaver(mm)  # writes the sessions a dead process owed
        mm.flush()
        store = HarombeStore(mm, index={"embed": FakeEmbedder(), "fields": ["text"]})
        for kind, key, word in acks:
            if kind == "item":
                item = store.get(("notes",), key)
                assert item is not None
                assert word in item.value["text"]
                continue
            [text] = [m.content for m in mm.get_messages(key) if word in m.content]
            assert text in [h.message.content for h in mm.search(word, session_id=key)]
            similar = mm.search_similar(text, top_k=3, session_id=key)
            assert text in [m.content for m in similar]
        newest = saver.get_tuple({"configurable": {"thread_id": "thread"}})
        assert newest is not None
        checkpointed = [m.content for m in newest.checkpoint["channel_values"]["messages"]]
        assert checkpointed == [m.content for m in mm.get_messages("thread")]
        assert len(checkpointed) == 6
        saver.close()
