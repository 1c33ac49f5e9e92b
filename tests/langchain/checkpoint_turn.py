"""One agent run (create_agent + HarombeSaver + a scripted tool-calling model), as a process.

The tests run it as its own process, so everything is rebuilt from the database location: a
thread resumes only through what the checkpointer stored. With ``--hang-in-tool`` the tool
writes a marker file and then waits forever, so the test can kill the process mid-run.
Prints every model input, the final answer and the thread's messages as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
from langchain_core.tools import tool

from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeSaver, RecordingChatModel

HANG_MARKER: Path | None = None


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    if HANG_MARKER is not None:
        HANG_MARKER.write_text("in the tool")
        while True:
            time.sleep(1)
    return a + b


def main() -> None:
    global HANG_MARKER
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("thread")
    parser.add_argument("question", help="the user's message; '-' resumes the thread instead")
    parser.add_argument("script", help="JSON list: strings or {'tool_calls': [...]} replies")
    parser.add_argument("--user", default=None)
    parser.add_argument("--hang-in-tool", default=None, help="marker file; the tool then hangs")
    args = parser.parse_args()
    HANG_MARKER = Path(args.hang_in_tool) if args.hang_in_tool else None
    replies = [
        r if isinstance(r, str) else AIMessage(content="", tool_calls=r["tool_calls"])
        for r in json.loads(args.script)
    ]
    configurable = {"thread_id": args.thread}
    if args.user is not None:
        configurable["user_id"] = args.user
    with MemoryManager(args.db, embedding=None) as manager:
        model = RecordingChatModel(responses=replies)
        agent = create_agent(
            model, tools=[add], system_prompt="You add numbers.",
            checkpointer=HarombeSaver(manager),
        )
        config = {"configurable": configurable}
        payload = None if args.question == "-" else {"messages": [HumanMessage(args.question)]}
        result = agent.invoke(payload, config=config, durability="sync")
        print(
            json.dumps(
                {
                    "answer": result["messages"][-1].text,
                    "calls": [messages_to_dict(c) for c in model.calls],
                    "messages": messages_to_dict(result["messages"]),
                }
            )
        )


if __name__ == "__main__":
    main()
