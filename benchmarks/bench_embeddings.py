"""Embedding throughput of each local backend, measured in the same run on the same texts.

Texts are synthetic chat messages generated here (short acknowledgements, questions, one- and
two-sentence statements, a few long paragraphs), so the script needs no data set. Each backend
embeds the whole corpus ``--rounds`` times, rounds interleaved across backends so a noisy
neighbour on the machine hurts all of them alike; the best and the median round are printed.
Agreement with the sentence-transformers reference is printed as cosine (min / mean) and as
neighbour overlap: the share of each query's reference top-10 that the backend also ranks in
its top 10 (1.000 means retrieval cannot tell the two apart).

    python benchmarks/bench_embeddings.py                      # st, onnx, onnx-int8
    python benchmarks/bench_embeddings.py --n 2000 --rounds 5 --backends st onnx
    python benchmarks/bench_embeddings.py --backends onnx --ingest   # + save_messages/flush

``--ingest`` adds rows for the whole ingestion path: the texts saved through
``MemoryManager.save_messages`` as one conversation (two named speakers taking turns) and
``flush()``, embedded by the ``onnx`` embedder (else the first backend) into a database file
with the default in-database vector index (``--index chroma``: a Chroma folder beside it;
``--ingest-store memory``: an in-memory store). Its
reference is the same embedder's own throughput on the same texts, in the same rounds:
ingestion embeds each message with its speaker's name and the turn it answers (see
``harombe_core.vectors.indexer.embedding_text``), so the reference embeds exactly those
strings, called as a user would (one ``embed`` call for all of them) with the best of
``--ref-batch-sizes``. Ratios are printed per wall-clock second (best and median round) and per
CPU-second (best round), which a busy machine does not inflate. The ratio to the plain texts'
row is printed too: it adds the cost of the longer texts (the context) to the pipeline's own.
A second row (``ingest-plain``) ingests with ``embed_context`` off; with ``st`` among the
backends, both are also printed as ratios to sentence-transformers' own throughput on the
plain texts (the ingestion goal is 2x).
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this folder first on sys.path, where a sibling script could
# shadow a standard-library module; import from the repository root instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from harombe_core.embeddings.base import Embedder  # noqa: E402

NAMES = ["Ann", "Bob", "Caroline", "Melanie", "Dev", "Priya", "Tom", "Jo"]
PLACES = ["Lisbon", "the lake", "my parents' place", "the office", "Kyoto", "the gym", "Berlin"]
THINGS = [
    "the pottery class",
    "my new job",
    "the adoption agency",
    "a road trip",
    "the concert",
    "my daughter's recital",
    "the camping trip",
    "that book you lent me",
    "the charity run",
    "our landlord",
    "the vet appointment",
    "the painting I started",
    "my sister's wedding",
]
FEELINGS = ["excited", "nervous", "tired", "really happy", "a bit stressed", "proud", "relieved"]
TIMES = ["yesterday", "last week", "this morning", "two weeks ago", "on Saturday", "last summer"]
ACKS = ["ok", "thanks!", "haha yes", "sounds good", "sure, see you then", "omg really?", "nice!"]


def chat_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` chat-like messages with a realistic spread of lengths (5 to ~120 tokens)."""
    rng = random.Random(seed)

    def sentence() -> str:
        forms: list[Callable[[], str]] = [
            lambda: f"I went to {rng.choice(PLACES)} {rng.choice(TIMES)} for {rng.choice(THINGS)}.",
            lambda: f"I'm {rng.choice(FEELINGS)} about {rng.choice(THINGS)}.",
            lambda: f"How did {rng.choice(THINGS)} go, {rng.choice(NAMES)}?",
            lambda: (
                f"{rng.choice(NAMES)} told me {rng.choice(TIMES)} that {rng.choice(THINGS)} "
                f"was moved to {rng.choice(PLACES)}."
            ),
            lambda: f"Do you think I should sign up for {rng.choice(THINGS)} before it fills up?",
            lambda: (
                f"Honestly {rng.choice(THINGS)} made me feel {rng.choice(FEELINGS)}, "
                f"especially after what happened {rng.choice(TIMES)}."
            ),
        ]
        return rng.choice(forms)()

    texts = []
    for i in range(n):
        r = rng.random()
        if r < 0.15:
            body = rng.choice(ACKS)
        elif r < 0.6:
            body = sentence()
        elif r < 0.93:
            body = " ".join(sentence() for _ in range(rng.randint(2, 3)))
        else:
            body = " ".join(sentence() for _ in range(rng.randint(5, 8)))
        texts.append(f"{body} ({i})" if rng.random() < 0.3 else body)  # some near-duplicates
    return texts


def build(backend: str, threads: int | None, batch_size: int) -> Embedder:
    from harombe_core.embeddings import OnnxEmbedder, SentenceTransformerEmbedder

    if backend == "st":
        if threads is not None:
            import torch

            torch.set_num_threads(threads)  # the same thread count as onnxruntime's, for fairness
        return SentenceTransformerEmbedder(batch_size=batch_size)
    if backend == "onnx":
        return OnnxEmbedder(threads=threads, batch_size=batch_size)
    if backend == "onnx-int8":
        return OnnxEmbedder(quantize=True, threads=threads, batch_size=batch_size)
    raise SystemExit(f"unknown backend {backend!r}; choose from st, onnx, onnx-int8")


def backend_threads(backend: str, threads: int | None) -> int:
    """The threads ``backend`` computes with: ``--threads``, else its library's default."""
    if backend == "st":
        import torch

        return int(torch.get_num_threads())
    return threads or os.cpu_count() or 1


def neighbour_overlap(reference: np.ndarray, other: np.ndarray, queries: int, k: int) -> float:
    """Mean share of each query's reference top-k that ``other`` also puts in its top k."""
    rng = np.random.default_rng(0)
    picks = rng.choice(len(reference), size=min(queries, len(reference)), replace=False)
    shares = []
    for q in picks:
        ref_top = set(np.argsort(-(reference @ reference[q]))[1 : k + 1].tolist())
        got_top = set(np.argsort(-(other @ other[q]))[1 : k + 1].tolist())
        shares.append(len(ref_top & got_top) / k)
    return float(np.mean(shares))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="messages per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per backend")
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["st", "onnx", "onnx-int8"],
        help="any of: st (sentence-transformers fp32), onnx (ONNX Runtime fp32), onnx-int8",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of every backend: onnxruntime's intra-op threads and torch's "
        "(torch.set_num_threads); default: each library's own (all cores)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ingest", action="store_true", help="also time save_messages+flush")
    parser.add_argument(
        "--ingest-store",
        choices=["file", "memory"],
        default="file",
        help="ingest into a database file (default) or an in-memory store",
    )
    parser.add_argument(
        "--index",
        default="database",
        help="the vector index ingestion fills: database (the default) or chroma",
    )
    parser.add_argument(
        "--ref-batch-sizes",
        type=int,
        nargs="+",
        default=[16, 32, 64],
        help="batch sizes tried for the ingest reference; the best counts (default 16 32 64)",
    )
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # onnxruntime's quantiser logs advice on first export

    texts = chat_texts(args.n, args.seed)
    words = [len(t.split()) for t in texts]
    print(
        f"corpus: {len(texts)} synthetic chat messages, words/message median "
        f"{statistics.median(words):.0f}, max {max(words)}; cores: {os.cpu_count()}"
    )
    if args.threads is not None and args.threads < 1:
        raise SystemExit("--threads must be >= 1")
    embedders: dict[str, Embedder] = {}
    for backend in args.backends:
        start = time.perf_counter()
        embedders[backend] = build(backend, args.threads, args.batch_size)
        embedders[backend].embed(texts[:8])  # load, export if first use, warm up
        print(
            f"{backend:>10}: ready in {time.perf_counter() - start:.1f}s "
            f"({embedders[backend].name}, dim {embedders[backend].dimension}, "
            f"{backend_threads(backend, args.threads)} threads)"
        )
    peer = "onnx" if "onnx" in embedders else args.backends[0]
    conversation = chat_messages(texts)
    embedded_texts = ingest_texts(conversation)

    rates: dict[str, list[float]] = {}
    cpu_rates: dict[str, list[float]] = {}

    def record(label: str, wall: float, cpu: float) -> None:
        rates.setdefault(label, []).append(len(texts) / wall)
        cpu_rates.setdefault(label, []).append(len(texts) / cpu)

    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for backend, embedder in embedders.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            vectors[backend] = embedder.embed(texts)
            record(backend, time.perf_counter() - start, time.process_time() - cpu_start)
        if args.ingest:
            embedder = embedders[peer]
            default_batch = getattr(embedder, "batch_size", None)
            for size in args.ref_batch_sizes:
                if default_batch is not None:
                    embedder.batch_size = size  # type: ignore[attr-defined]
                start, cpu_start = time.perf_counter(), time.process_time()
                embedder.embed(embedded_texts)
                record(f"ref@{size}", time.perf_counter() - start, time.process_time() - cpu_start)
            if default_batch is not None:
                embedder.batch_size = default_batch  # type: ignore[attr-defined]
            for label, context in (("ingest", True), ("ingest-plain", False)):
                timed = ingest(
                    embedder, conversation, args.ingest_store, context=context, index=args.index
                )
                record(label, *timed)

    # Wall-clock msg/s is what a user sees; msg per CPU-second is the same work measured in
    # CPU time, which other processes on a shared machine do not inflate.
    print(
        "\nbackend      best msg/s  median msg/s  msg/cpu-s  cosine vs st (min/mean)  "
        "top-10 overlap"
    )
    reference = vectors.get("st")
    for backend in args.backends:
        agreement = ""
        if reference is not None and backend != "st":
            cos = (vectors[backend] * reference).sum(axis=1)
            overlap = neighbour_overlap(reference, vectors[backend], 200, 10)
            agreement = f"{cos.min():.4f} / {cos.mean():.4f}        {overlap:.3f}"
        best, median = max(rates[backend]), statistics.median(rates[backend])
        cpu = max(cpu_rates[backend])
        print(f"{backend:<12}{best:>10.0f}  {median:>12.0f}  {cpu:>9.0f}  {agreement}")
    if args.ingest:
        report_ingest(rates, cpu_rates, peer, args.ref_batch_sizes, args.ingest_store)
        if "st" in rates:
            report_against_st(rates, cpu_rates)
    return 0


def report_against_st(rates: dict[str, list[float]], cpu_rates: dict[str, list[float]]) -> None:
    """Ingestion beside sentence-transformers' own throughput on the same messages (the goal
    is 2x), with ``embed_context`` on (each message embedded with the turn it answers) and
    off."""
    st_wall, st_cpu = statistics.median(rates["st"]), max(cpu_rates["st"])
    for label, what in (("ingest", "embed_context on"), ("ingest-plain", "embed_context off")):
        wall, cpu = statistics.median(rates[label]), max(cpu_rates[label])
        print(
            f"{label} / st ({what}): wall median {wall / st_wall:.2f}x, per cpu-s "
            f"{cpu / st_cpu:.2f}x"
        )


def report_ingest(
    rates: dict[str, list[float]],
    cpu_rates: dict[str, list[float]],
    peer: str,
    sizes: list[int],
    store: str,
) -> None:
    """The ingest rows and their ratios to the embedder's own throughput (see the docstring)."""
    for size in sizes:
        label = f"ref@{size}"
        print(
            f"{peer + ' @' + str(size):<12}{max(rates[label]):>10.0f}  "
            f"{statistics.median(rates[label]):>12.0f}  {max(cpu_rates[label]):>9.0f}  "
            "the texts ingestion embeds (with context), one embed() call"
        )
    best_wall = max(sizes, key=lambda b: statistics.median(rates[f"ref@{b}"]))
    best_cpu = max(sizes, key=lambda b: max(cpu_rates[f"ref@{b}"]))
    wall_ref = rates[f"ref@{best_wall}"]
    cpu_ref = max(cpu_rates[f"ref@{best_cpu}"])
    ingest_wall, ingest_cpu = rates["ingest"], max(cpu_rates["ingest"])
    print(
        f"{'ingest':<12}{max(ingest_wall):>10.0f}  {statistics.median(ingest_wall):>12.0f}  "
        f"{ingest_cpu:>9.0f}  save_messages + flush with {peer} ({store} store)"
    )
    plain = rates["ingest-plain"]
    print(
        f"{'ingest-plain':<12}{max(plain):>10.0f}  {statistics.median(plain):>12.0f}  "
        f"{max(cpu_rates['ingest-plain']):>9.0f}  the same with embed_context off"
    )
    print(
        f"ingest / {peer} on the same texts (batch {best_wall} wall, {best_cpu} cpu): "
        f"wall best {max(ingest_wall) / max(wall_ref):.0%}, median "
        f"{statistics.median(ingest_wall) / statistics.median(wall_ref):.0%}; "
        f"per cpu-s {ingest_cpu / cpu_ref:.0%}"
    )
    print(
        f"ingest / {peer} on the plain texts (context included in the cost): wall median "
        f"{statistics.median(ingest_wall) / statistics.median(rates[peer]):.0%}, per cpu-s "
        f"{ingest_cpu / max(cpu_rates[peer]):.0%}"
    )


def chat_messages(texts: list[str]) -> list[Any]:
    """``texts`` as one conversation: two named speakers taking turns."""
    from harombe_core import Message

    speakers = [("user", "Ann"), ("assistant", "Bo")]
    return [
        Message(role=speakers[i % 2][0], name=speakers[i % 2][1], content=text)
        for i, text in enumerate(texts)
    ]


def ingest_texts(messages: list[Any]) -> list[str]:
    """The strings ingestion embeds for ``messages`` saved as one conversation: each message
    with its speaker and, as context, the message before it."""
    from harombe_core.vectors.indexer import embedding_text

    return [
        embedding_text(message, messages[i - 1].content if i else "")
        for i, message in enumerate(messages)
    ]


def ingest(
    embedder: Embedder, messages: list[Any], store: str, *, context: bool, index: str
) -> tuple[float, float]:
    """Save ``messages`` as one conversation through the public API and wait for the vectors;
    the wall and CPU seconds of ``save_messages`` + ``flush()`` (opening the store is not
    counted). ``context``: ``vector_store.embed_context``."""
    import tempfile

    from harombe_core import MemoryManager
    from harombe_core.config import load_config

    config = load_config({"vector_store": {"embed_context": context}})
    with tempfile.TemporaryDirectory() as folder:
        path = ":memory:" if store == "memory" else os.path.join(folder, "ingest.db")
        with MemoryManager(path, embedding=embedder, vector_store=index, config=config) as mm:
            sid = mm.create_session(user_id="bench")
            mm.flush()
            start, cpu_start = time.perf_counter(), time.process_time()
            mm.save_messages(sid, messages)
            mm.flush()
            return time.perf_counter() - start, time.process_time() - cpu_start


if __name__ == "__main__":
    raise SystemExit(main())
