"""One agent turn (create_agent + HarombeMemoryMiddleware + a scripted tool-calling model).

Run as its own process by the tests, so every object is rebuilt from the database path. The
script of the fake model is given as JSON; prints every model input and the final answer.
"""

from __future__ import annotations

import argparse
import json

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
from langchain_core.tools import tool

from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeMemoryMiddleware, RecordingChatModel


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("thread")
    parser.add_argument("question")
    parser.add_argument("script", help="JSON list: strings or {'tool_calls': [...]} replies")
    parser.add_argument("--max-tokens", type=int, default=None)
    args = parser.parse_args()
    replies = [
        r if isinstance(r, str) else AIMessage(content="", tool_calls=r["tool_calls"])
        for r in json.loads(args.script)
    ]
    with MemoryManager(args.db, embedding=None) as manager:
        model = RecordingChatModel(responses=replies)
        agent = create_agent(
            model,
            tools=[add],
            system_prompt="You add numbers.",
            middleware=[HarombeMemoryMiddleware(manager, max_tokens=args.max_tokens)],
        )
        result = agent.invoke(
            {"messages": [HumanMessage(args.question)]},
            config={"configurable": {"thread_id": args.thread}},
        )
        print(
            json.dumps(
                {
                    "answer": result["messages"][-1].text,
                    "calls": [messages_to_dict(c) for c in model.calls],
                }
            )
        )


if __name__ == "__main__":
    main()
