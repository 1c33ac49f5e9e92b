"""Thread attachment accuracy of ChatMemory's node selectors on interleaved LoCoMo conversations.

Each benchmark session interleaves, in random order, the exchanges of 3 different LoCoMo
conversations (a speaker_a turn as the human message, the following speaker_b turn as the
assistant message; consecutive turns of one speaker are joined). Speaker names are removed from
the text, so only what is said can tell the conversations apart. Every exchange is appended
through ``ChatMemory.threaded(...)``; attachment accuracy is the share of human nodes whose
parent came from the same source conversation (a human node that starts a new thread counts as
right only if its conversation had not been seen yet). The first node of a session is not scored.

Example::

    python benchmarks/threading.py --data ../shared/data/locomo/locomo_dev.json --seed 0

The data is read from the given path only; nothing of it is stored.
"""

# This file is named like the standard library's ``threading`` module: drop its own directory
# from the import path before anything imports ``threading``.
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402


@dataclass(frozen=True)
class Exchange:
    source: str
    human: str
    assistant: str


def _name_pattern(names: list[str]) -> re.Pattern[str]:
    # Full names and their 3+ letter prefixes used as nicknames ("Mel" for "Melanie").
    alternatives = sorted({n for name in names for n in (name, name[:3]) if len(n) >= 3}, key=len)
    words = "|".join(re.escape(n) for n in reversed(alternatives))
    return re.compile(rf"\b(?:{words})[a-z]*\b[,!]?\s*")


def load_conversations(path: str) -> dict[str, list[Exchange]]:
    """Every conversation of a LoCoMo file as a list of (human, assistant) exchanges."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    out: dict[str, list[Exchange]] = {}
    for sample in data:
        conv = sample["conversation"]
        a, b = conv["speaker_a"], conv["speaker_b"]
        strip = _name_pattern([a, b])
        groups: list[tuple[str, int, list[str]]] = []
        k = 1
        while f"session_{k}" in conv:
            for turn in conv[f"session_{k}"]:
                text = strip.sub("", turn.get("text", "")).strip()
                if not text:
                    continue
                if groups and groups[-1][0] == turn["speaker"] and groups[-1][1] == k:
                    groups[-1][2].append(text)
                else:
                    groups.append((turn["speaker"], k, [text]))
            k += 1
        exchanges: list[Exchange] = []
        i = 0
        while i < len(groups) - 1:
            first, second = groups[i], groups[i + 1]
            if first[0] == a and second[0] == b and first[1] == second[1]:
                exchanges.append(
                    Exchange(sample["sample_id"], " ".join(first[2]), " ".join(second[2]))
                )
                i += 2
            else:
                i += 1
        out[sample["sample_id"]] = exchanges
    return out


def build_sessions(
    conversations: dict[str, list[Exchange]],
    *,
    sessions: int,
    per_session: int,
    max_exchanges: int,
    rng: random.Random,
) -> list[list[Exchange]]:
    """Random interleavings of ``per_session`` different conversations."""
    ids = sorted(conversations)
    if len(ids) < per_session:
        raise SystemExit(f"need at least {per_session} conversations, the file has {len(ids)}")
    built = []
    for _ in range(sessions):
        streams = []
        for cid in rng.sample(ids, per_session):
            exchanges = conversations[cid]
            if max_exchanges and len(exchanges) > max_exchanges:
                start = rng.randrange(0, len(exchanges) - max_exchanges + 1)
                exchanges = exchanges[start : start + max_exchanges]
            streams.append(list(exchanges))
        order: list[Exchange] = []
        while any(streams):
            stream = rng.choice([s for s in streams if s])
            order.append(stream.pop(0))
        built.append(order)
    return built


def attachment_accuracy(memory: Any, order: list[Exchange]) -> tuple[int, int]:
    """(right, scored) for one session already appended to ``memory`` in ``order``."""
    from harombe_core.threads import node_of

    source: dict[int, str] = {}
    humans: list[int] = []
    for node_id, exchange in zip(sorted(memory.graph.nodes)[0::2], order, strict=True):
        source[node_id] = exchange.source
        source[node_id + 1] = exchange.source
        humans.append(node_id)
    seen: set[str] = set()
    right = scored = 0
    for position, node_id in enumerate(humans):
        src = source[node_id]
        if position > 0:
            parent = node_of(memory.graph, node_id).parent_id
            scored += 1
            right += (src not in seen) if parent is None else (source[parent] == src)
        seen.add(src)
    return right, scored


class NearestMessageSelector:
    """Plain nearest neighbour over every earlier message, the human ones included.

    The new human message goes under the assistant node of the exchange whose message (either
    side) is most similar to it. A second reference beside ``nearest`` (which compares with
    assistant messages only, the one place a selector may attach).
    """

    name = "nearest-any"

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.vectors: dict[int, Any] = {}

    def select_parent(self, graph: Any, message: Any) -> int | None:
        import numpy as np

        from harombe_core.threads import node_of

        missing = sorted(i for i in graph.nodes if i not in self.vectors)
        if missing:
            texts = [node_of(graph, i).message.content for i in missing]
            self.vectors.update(zip(missing, self.embedder.embed(texts), strict=True))
        ids = sorted(self.vectors)
        if not ids:
            return None
        query = np.asarray(self.embedder.embed_query(message.content), dtype=np.float32)
        best = ids[int(np.argmax(np.stack([self.vectors[i] for i in ids]) @ query))]
        if node_of(graph, best).message.role == "assistant":
            return best
        answers = sorted(graph.successors(best))
        return next((a for a in answers if node_of(graph, a).message.role == "assistant"), None)


def make_selector(name: str, embedder: Any, llm: Any) -> Any:
    from harombe_core.threads import EmbeddingNodeSelector, LinearNodeSelector, LLMNodeSelector

    if name == "linear":
        return LinearNodeSelector()
    if name == "nearest":  # plain nearest neighbour: the reference the embedding selector beats
        return EmbeddingNodeSelector(
            embedder,
            speaker_weight=0.0,
            thread_weight=0.0,
            recency_weight=0.0,
            leaf_bonus=0.0,
            new_thread_threshold=None,
            reply_query_weight=0.0,
        )
    if name == "nearest-any":
        return NearestMessageSelector(embedder)
    if name == "embedding":
        return EmbeddingNodeSelector(embedder)
    if name == "llm":
        return LLMNodeSelector(llm)
    raise SystemExit(f"unknown selector {name!r}")


def load_llm(spec: str) -> Any:
    """``module:attribute``: a callable prompt -> str, or a factory returning one."""
    module_name, _, attribute = spec.partition(":")
    target = getattr(importlib.import_module(module_name), attribute or "llm")
    return target() if isinstance(target, type) else target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="path to a LoCoMo JSON file")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--sessions", type=int, default=5, help="interleaved sessions (default 5)")
    parser.add_argument(
        "--conversations", type=int, default=3, help="conversations per session (default 3)"
    )
    parser.add_argument(
        "--max-exchanges",
        type=int,
        default=0,
        help="take a random stretch of at most this many exchanges per conversation (0: all)",
    )
    parser.add_argument(
        "--selectors",
        default="linear,nearest,nearest-any,embedding",
        help="comma-separated: linear, nearest, nearest-any, embedding, llm (default: all but llm)",
    )
    parser.add_argument(
        "--llm",
        default=None,
        help="module:callable giving an llm(prompt) -> str; adds the 'llm' selector",
    )
    parser.add_argument("--embedder", default="default", help="embedder spec (default: bundled)")
    args = parser.parse_args(argv)

    from harombe_core.chat_memory import ChatMemory
    from harombe_core.embeddings import resolve_embedder

    rng = random.Random(args.seed)
    conversations = load_conversations(args.data)
    sessions = build_sessions(
        conversations,
        sessions=args.sessions,
        per_session=args.conversations,
        max_exchanges=args.max_exchanges,
        rng=rng,
    )
    names = [s.strip() for s in args.selectors.split(",") if s.strip()]
    llm = load_llm(args.llm) if args.llm else None
    if llm is not None and "llm" not in names:
        names.append("llm")
    embedder = resolve_embedder(args.embedder)
    total_exchanges = sum(len(s) for s in sessions)
    print(
        f"{len(sessions)} sessions x {args.conversations} interleaved conversations, "
        f"{total_exchanges} exchanges, seed {args.seed}"
    )
    for name in names:
        right = scored = 0
        per_session = []
        started = time.perf_counter()
        for order in sessions:
            memory = ChatMemory.threaded(make_selector(name, embedder, llm))
            for exchange in order:
                memory.append(exchange.human, exchange.assistant)
            r, s = attachment_accuracy(memory, order)
            memory.close()
            right, scored = right + r, scored + s
            per_session.append(100 * r / max(s, 1))
        elapsed = time.perf_counter() - started
        detail = " ".join(f"{p:.1f}" for p in per_session)
        print(
            f"{name:>10}: attachment accuracy {100 * right / max(scored, 1):5.1f}%  "
            f"(per session: {detail}; {1000 * elapsed / total_exchanges:.1f} ms/exchange)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
