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

These namespaces hold no rows of the item tables, so ``list_namespaces`` does not show them,
and a batch's fact operations are applied beside (not inside) its item transaction.
"""

from __future__ import annotations

from typing import Any

from langgraph.store.base import GetOp, Item, Op, PutOp, Result, SearchItem, SearchOp

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.integration import items

__all__ = ["FACTS_NAMESPACE", "is_fact_op", "run_fact_op"]

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


def _find(manager: MemoryManager, user: str, key: str) -> Any:
    """The current fact a key names: its subject, else its id."""
    wanted = " ".join(key.lower().split())
    facts = manager.get_facts(user)
    for fact in facts:
        if fact.subject == wanted:
            return fact
    if key.isdigit():
        return next((f for f in facts if f.id == int(key)), None)
    return None


def run_fact_op(manager: MemoryManager, op: Op) -> Result:
    """Apply one fact operation (see the module docstring); its LangGraph result."""
    if isinstance(op, SearchOp):
        user = op.namespace_prefix[2]
        found: list[tuple[Any, float | None]]
        if op.query:
            hits = manager.search_facts(user, op.query, top_k=max(op.limit + op.offset, 1))
            found = [(h.fact, h.score) for h in hits]
        else:
            found = [(f, None) for f in reversed(manager.get_facts(user))]
        if op.filter:
            items.check_filter(op.filter)
            found = [(f, s) for f, s in found if items.matches_filter(_value(f), op.filter)]
        page = found[op.offset : op.offset + op.limit]
        return [SearchItem(**_fields(op.namespace_prefix, f), score=s) for f, s in page]
    assert isinstance(op, (GetOp, PutOp))  # is_fact_op admits nothing else
    user = op.namespace[2]
    if isinstance(op, GetOp):
        fact = _find(manager, user, op.key)
        return None if fact is None else Item(**_fields(op.namespace, fact))
    if op.value is None:
        fact = _find(manager, user, op.key)
        if fact is not None:
            manager.forget_fact(user, fact.id)
        return None
    text = op.value.get("content", op.value.get("text"))
    if not isinstance(text, str):
        raise InvalidInputError(
            'a fact item needs {"content": "what is true of the user"} (a str), got '
            f"{type(text).__name__}."
        )
    subject = None if op.key.isdigit() else op.key
    manager.add_fact(user, text, kind=op.value.get("kind") or "fact", subject=subject)
    return None
