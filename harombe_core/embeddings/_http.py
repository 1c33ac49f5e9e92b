"""A small JSON-over-HTTP client on the standard library, and the base of the remote embedders.

urllib keeps the remote backends free of dependencies. Transient failures (connection reset,
HTTP 429 and 5xx) are retried with a short backoff; everything else becomes an
:class:`EmbeddingError` that names the server and what to check. :class:`HttpEmbedder` holds
what every remote embedder does the same way: batching, the dimension probe and the check that
the server's vectors have one length.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from harombe_core.embeddings.base import BaseEmbedder, FloatArray
from harombe_core.errors import EmbeddingError

__all__ = ["HttpEmbedder", "post_json"]

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


def post_json(
    url: str,
    payload: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    max_retries: int = 2,
    service: str = "embedding server",
) -> Any:
    """POST ``payload`` as JSON and return the decoded JSON answer."""
    body = json.dumps(payload).encode("utf-8")
    all_headers = {"Content-Type": "application/json", "Accept": "application/json"}
    all_headers.update(headers or {})
    attempt = 0
    while True:
        request = urllib.request.Request(url, data=body, headers=all_headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
            break
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            exc.close()
            if exc.code in _RETRY_STATUS and attempt < max_retries:
                attempt += 1
                time.sleep(0.25 * 2**attempt)
                continue
            hint = " (check the API key)" if exc.code in (401, 403) else ""
            if exc.code == 404:
                hint = " (check the base URL and that the model exists on the server)"
            raise EmbeddingError(
                f"{service} at {url} answered HTTP {exc.code}{hint}: {detail}"
            ) from exc
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            if attempt < max_retries:
                attempt += 1
                time.sleep(0.25 * 2**attempt)
                continue
            reason = getattr(exc, "reason", exc)
            raise EmbeddingError(
                f"cannot reach {service} at {url}: {reason}. Check that it is running and that "
                "base_url is right"
            ) from exc
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise EmbeddingError(f"{service} at {url} did not answer JSON: {raw[:200]!r}") from exc


class HttpEmbedder(BaseEmbedder):
    """An embedder behind an HTTP endpoint: subclasses send one batch in :meth:`_request`.

    ``dimension`` is asked of the server with one short request the first time it is needed,
    unless known already (given, or learnt from the first real batch). Texts go in batches of
    ``batch_size``.
    """

    #: Who answered, for error messages ("Ollama", "the endpoint").
    service = "the endpoint"
    base_url: str
    batch_size: int
    timeout: float
    _dimension_known: int | None

    def _request(self, texts: list[str]) -> list[Any]:
        """The server's vectors for ``texts``, in order."""
        raise NotImplementedError

    def _post_list(
        self,
        path: str,
        payload: dict[str, Any],
        key: str,
        count: int,
        missing: str,
        *,
        headers: dict[str, str] | None = None,
        service: str | None = None,
    ) -> list[Any]:
        """POST ``payload`` to ``path`` under ``base_url`` and return the answer's ``key`` list.

        Every API answers a batch with one list of ``count`` items (one per text) under a
        key; anything else is an :class:`EmbeddingError` saying ``missing``.
        """
        answer = post_json(
            f"{self.base_url}{path}",
            payload,
            headers=headers,
            timeout=self.timeout,
            service=service or self.service,
        )
        items = answer.get(key) if isinstance(answer, dict) else None
        if not isinstance(items, list) or len(items) != count:
            raise EmbeddingError(missing)
        return items

    def _repr_fields(self) -> dict[str, object]:
        return {"name": self.name, "dimension": self._dimension_known, "base_url": self.base_url}

    @property
    def dimension(self) -> int:
        if self._dimension_known is None:
            self._dimension_known = len(self._request(["dimension probe"])[0])
        return self._dimension_known

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        import numpy as np

        rows: list[Any] = []
        for start in range(0, len(texts), self.batch_size):
            rows.extend(self._request(texts[start : start + self.batch_size]))
        try:
            vectors = np.asarray(rows, dtype=np.float32)
        except ValueError as exc:
            raise EmbeddingError(
                f"{self.service} returned vectors of different lengths: {exc}"
            ) from exc
        if self._dimension_known is None and vectors.ndim == 2:
            self._dimension_known = int(vectors.shape[1])  # learnt without a probe request
        return vectors
