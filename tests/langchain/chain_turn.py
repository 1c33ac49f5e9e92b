"""One chat turn through an LCEL chain with persistent history, run as its own process.

Used by the tests to prove that history survives a restart: every Python object is rebuilt from
the database path alone. Prints what the model was sent, as JSON, on stdout.
"""

from __future__ import annotations

import argparse
import json

from langchain_core.messages import messages_to_dict
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from harombe_core.manager import MemoryManager
from langchain_harombe import RecordingChatModel, session_history_factory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("session")
    parser.add_argument("question")
    parser.add_argument("--reply", default="ok")
    parser.add_argument("--max-tokens", type=int, default=None)
    args = parser.parse_args()
    with MemoryManager(args.db, embedding=None) as manager:
        model = RecordingChatModel(responses=[args.reply])
        prompt = ChatPromptTemplate.from_messages(
            [
                ("system", "You are terse."),
                MessagesPlaceholder("history"),
                ("human", "{question}"),
            ]
        )
        chain = RunnableWithMessageHistory(
            prompt | model,
            session_history_factory(manager, max_tokens=args.max_tokens),
            input_messages_key="question",
            history_messages_key="history",
        )
        answer = chain.invoke(
            {"question": args.question}, config={"configurable": {"session_id": args.session}}
        )
        print(json.dumps({"answer": answer.text, "sent": messages_to_dict(model.calls[0])}))


if __name__ == "__main__":
    main()
