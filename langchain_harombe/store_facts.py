"""A user's facts as LangGraph store items, under the namespace ``("harombe", "facts", user_id)``.

So that LangGraph code and LangMem's memory tools (``create_manage_memory_tool``,
``create_search_memory_tool``) read and write harombe's user memory through
:class:`~langchain_harombe.store.HarombeStore`:

* an item's **key is the fact's subject key**: ``put(ns, "home city", {"content": "Lives in
  Berlin"})`` adds the fact, and closes (keeps as history) the current value of that key, as
  any update of a subject does; a fact without a subject is addressed by its id (``"17"``);
* the value is ``{"content": text, "kind": ..., "subject": ..., "id": ..., "valid_from": ...,
  "sources": [[session_id, message_id], ...]}``; a put reads ``content`` (or ``text``) and
  ``kind`` (default ``"fact"``);
* ``delete`` forgets the current fact of that key (vectors and keyword entries with it);
* ``search`` with a query finds facts by meaning and keyword (``score`` as harombe ranks them),
  without one lists the current facts; ``filter`` matches on the value as for other items.

``list_namespaces`` lists ``("harombe", "facts", user_id)`` for every user with current facts,
beside the item namespaces (prefix, suffix, ``max_depth``, ``limit`` and ``offset`` apply to
both). A batch's fact reads run before its transaction (as every read of a batch sees the store
as it was before it); its fact writes are planned (embedded) before it too, then applied inside
the batch's one transaction, in batch order with its item puts: a failure anywhere leaves
neither facts nor items half-written.
"""

from __future__ import annotations

from typing import Any

from langgraph.store.base import GetOp, Item, Op, PutOp, Result, SearchItem, SearchOp

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.integration import (
    Body,
    Dialect,
    FactProposal,
    Flow,
    check_fact_text,
    check_kind,
    check_subject,
    check_user,
    forget_current,
    items,
    users_with_facts,
)
from harombe_core.integration import Op as StoreOp

__all__ = [
    "FACTS_NAMESPACE",
    "check_fact_ttl",
    "fact_namespaces",
    "is_fact_op",
    "plan_fact_write",
    "read_fact_op",
]

#: The namespace prefix of the facts: ``("harombe", "facts", user_id)``.
FACTS_NAMESPACE = ("harombe", "facts")


def is_fact_op(op: Op) -> bool:
    """Whether ``op`` addresses a user's facts (exactly one user's namespace)."""
    namespace = getattr(op, "namespace", None)
    if namespace is None:
        namespace = getattr(op, "namespace_prefix", None)
    return (
        isinstance(namespace, tuple)
        and len(namespace) == 3
        and namespace[:2] == FACTS_NAMESPACE
        and isinstance(op, (GetOp, PutOp, SearchOp))
    )


def fact_namespaces(dialect: Dialect) -> Body[list[tuple[str, ...]]]:
    """The facts namespaces of the users with current facts, as steps of the caller's body
    (what ``list_namespaces`` adds to the item namespaces)."""
    users: list[str] = yield from users_with_facts().body(dialect)
    return [(*FACTS_NAMESPACE, user) for user in users]


def _value(fact: Any) -> dict[str, Any]:
    return {
        "content": fact.text,
        "kind": fact.kind,
        "subject": fact.subject,
        "id": fact.id,
        "status": fact.status,
        "valid_from": fact.valid_from.isoformat(),
        "sources": [[s.session_id, s.message_id] for s in fact.sources],
    }


def _fields(namespace: tuple[str, ...], fact: Any) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "key": fact.subject or str(fact.id),
        "value": _value(fact),
        "created_at": fact.recorded_at,
        "updated_at": fact.updated_at,
    }


def _fact_id(key: str) -> int | None:
    """The id a key names when it is one written as ``str(id)`` (the key of a fact without a
    subject); None for any other key ("017" is a subject key, as "home city" is)."""
    return int(key) if key.isascii() and key.isdigit() and key == str(int(key)) else None


def _find(facts: list[Any], key: str) -> Any:
    """The current fact a key names among ``facts``: its subject, else (a key written as an
    id) the fact of that id without a subject (a fact with a subject has only that key)."""
    wanted = " ".join(key.lower().split())
    for fact in facts:
        if fact.subject == wanted:
            return fact
    fact_id = _fact_id(key)
    return next((f for f in facts if f.id == fact_id and f.subject is None), None)


def read_fact_op(manager: MemoryManager, op: Op) -> Flow[Result]:
    """The result of a fact read (a get, or a search: see the module docstring), as a flow of
    the manager's user memory (driven in place by ``batch``, on the event loop by ``abatch``)."""
    memory = manager.user_memory
    if isinstance(op, SearchOp):
        user = op.namespace_prefix[2]
        found: list[tuple[Any, float | None]]
        if op.query:
            top_k = max(op.limit + op.offset, 1)
            hits = yield from memory.search(user, op.query, top_k=top_k)
            found = [(h.fact, h.score) for h in hits]
        else:
            current = yield from memory.facts(user)
            found = [(f, None) for f in reversed(current)]
        if op.filter:
            items.check_filter(op.filter)
            found = [(f, s) for f, s in found if items.matches_filter(_value(f), op.filter)]
        page = found[op.offset : op.offset + op.limit]
        return [SearchItem(**_fields(op.namespace_prefix, f), score=s) for f, s in page]
    assert isinstance(op, GetOp)  # is_fact_op admits nothing else; puts are planned
    fact = _find((yield from memory.facts(op.namespace[2])), op.key)
    # the key as asked: keys that differ only in case or spacing name one subject
    return None if fact is None else Item(**{**_fields(op.namespace, fact), "key": op.key})


def check_fact_ttl(op: Op, default_ttl: float | None) -> None:
    """Refuse a fact put that asks for a ttl: a fact never expires, and a silent forever
    would keep what the caller meant to be gone. The store's ``default_ttl`` (which LangGraph
    fills into every put that gives none) is for its items, and passes."""
    ttl = getattr(op, "ttl", None)
    asked = isinstance(ttl, (int, float)) and ttl != default_ttl
    if isinstance(op, PutOp) and op.value is not None and asked:
        raise InvalidInputError(
            f"a fact does not expire (got ttl={ttl!r} for {op.key!r}): put it without a "
            "ttl, and delete it (harombe keeps no copy) when it should be forgotten."
        )


def plan_fact_write(manager: MemoryManager, op: PutOp) -> Flow[StoreOp[Any]]:
    """The store operation a fact put (or delete: ``value`` None) applies, checked and
    embedded now, to run inside the batch's transaction (see the module docstring)."""
    user = op.namespace[2]
    subject = check_subject(op.key)
    if op.value is None:
        return forget_current(check_user(user), subject, _fact_id(op.key))
    text = op.value.get("content", op.value.get("text"))
    if not isinstance(text, str):
        raise InvalidInputError(
            'a fact item needs {"content": "what is true of the user"} (a str), got '
            f"{type(text).__name__}. Structured memories, such as those of LangMem's "
            "create_memory_store_manager, belong in an item namespace (e.g. "
            '("memories", "{langgraph_user_id}")), not in ("harombe", "facts", user).'
        )
    proposal = FactProposal(
        "set",
        check_fact_text(text),
        kind=check_kind(op.value.get("kind") or "fact"),
        subject=subject,
        target_id=_fact_id(op.key),
    )
    planned: StoreOp[Any] = yield from manager.user_memory.prepare(user, [proposal], origin="user")
    return planned
