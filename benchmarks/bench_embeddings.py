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

``--ingest`` adds a row for the whole ingestion path: the same texts saved through
``MemoryManager.save_messages`` (two named speakers taking turns) and ``flush()``, embedded
by the default backend's embedder into an in-memory Chroma index, with its ratio to that
embedder's own throughput in the same rounds.
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

import numpy as np  # noqa: E402

from harombe_core.embeddings.base import Embedder  # noqa: E402

NAMES = ["Ann", "Bob", "Caroline", "Melanie", "Dev", "Priya", "Tom", "Jo"]
PLACES = ["Lisbon", "the lake", "my parents' place", "the office", "Kyoto", "the gym", "Berlin"]
THINGS = [
    "the pottery class", "my new job", "the adoption agency", "a road trip", "the concert",
    "my daughter's recital", "the camping trip", "that book you lent me", "the charity run",
    "our landlord", "the vet appointment", "the painting I started", "my sister's wedding",
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
            lambda: f"{rng.choice(NAMES)} told me {rng.choice(TIMES)} that {rng.choice(THINGS)} "
            f"was moved to {rng.choice(PLACES)}.",
            lambda: f"Do you think I should sign up for {rng.choice(THINGS)} before it fills up?",
            lambda: f"Honestly {rng.choice(THINGS)} made me feel {rng.choice(FEELINGS)}, "
            f"especially after what happened {rng.choice(TIMES)}.",
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
        return SentenceTransformerEmbedder(batch_size=batch_size)
    if backend == "onnx":
        return OnnxEmbedder(threads=threads, batch_size=batch_size)
    if backend == "onnx-int8":
        return OnnxEmbedder(quantize=True, threads=threads, batch_size=batch_size)
    raise SystemExit(f"unknown backend {backend!r}; choose from st, onnx, onnx-int8")


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
        "--backends", nargs="+", default=["st", "onnx", "onnx-int8"],
        help="any of: st (sentence-transformers fp32), onnx (ONNX Runtime fp32), onnx-int8",
    )
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime threads")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ingest", action="store_true", help="also time save_messages+flush")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # onnxruntime's quantiser logs advice on first export

    texts = chat_texts(args.n, args.seed)
    words = [len(t.split()) for t in texts]
    print(f"corpus: {len(texts)} synthetic chat messages, words/message median "
          f"{statistics.median(words):.0f}, max {max(words)}; cores: {os.cpu_count()}")
    embedders: dict[str, Embedder] = {}
    for backend in args.backends:
        start = time.perf_counter()
        embedders[backend] = build(backend, args.threads, args.batch_size)
        embedders[backend].embed(texts[:8])  # load, export if first use, warm up
        print(f"{backend:>10}: ready in {time.perf_counter() - start:.1f}s "
              f"({embedders[backend].name}, dim {embedders[backend].dimension})")

    rates: dict[str, list[float]] = {b: [] for b in args.backends}
    cpu_rates: dict[str, list[float]] = {b: [] for b in args.backends}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for backend, embedder in embedders.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            vectors[backend] = embedder.embed(texts)
            rates[backend].append(len(texts) / (time.perf_counter() - start))
            cpu_rates[backend].append(len(texts) / (time.process_time() - cpu_start))
        if args.ingest:
            ingest_embedder = embedders.get("onnx") or next(iter(embedders.values()))
            wall, cpu = ingest(ingest_embedder, texts)
            rates.setdefault("ingest", []).append(len(texts) / wall)
            cpu_rates.setdefault("ingest", []).append(len(texts) / cpu)

    # Wall-clock msg/s is what a user sees; msg per CPU-second is the same work measured in
    # CPU time, which other processes on a shared machine do not inflate.
    print("\nbackend      best msg/s  median msg/s  msg/cpu-s  cosine vs st (min/mean)  "
          "top-10 overlap")
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
    if "ingest" in rates:
        peer = "onnx" if "onnx" in rates else args.backends[0]
        best, median = max(rates["ingest"]), statistics.median(rates["ingest"])
        print(f"{'ingest':<12}{best:>10.0f}  {median:>12.0f}  {max(cpu_rates['ingest']):>9.0f}  "
              f"save_messages + flush with {peer}")
        print(f"ingest / {peer} embedder: best {best / max(rates[peer]):.0%}, median "
              f"{median / statistics.median(rates[peer]):.0%}, per cpu-s "
              f"{max(cpu_rates['ingest']) / max(cpu_rates[peer]):.0%}")
    return 0


def ingest(embedder: Embedder, texts: list[str]) -> tuple[float, float]:
    """Save ``texts`` as one conversation through the public API and wait for the vectors;
    the wall and CPU seconds of ``save_messages`` + ``flush()`` (opening the store is not
    counted)."""
    from harombe_core import MemoryManager, Message

    speakers = [("user", "Ann"), ("assistant", "Bo")]
    messages = [
        Message(role=speakers[i % 2][0], name=speakers[i % 2][1], content=text)
        for i, text in enumerate(texts)
    ]
    with MemoryManager(":memory:", embedding=embedder, vector_store="chroma") as mm:
        sid = mm.create_session(user_id="bench")
        mm.flush()
        start, cpu_start = time.perf_counter(), time.process_time()
        mm.save_messages(sid, messages)
        mm.flush()
        return time.perf_counter() - start, time.process_time() - cpu_start


if __name__ == "__main__":
    raise SystemExit(main())
