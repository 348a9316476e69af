"""The operator's spans as its services see them: a port, and its no-op when tracing
is off.

Services and loops open spans through `Spans` without knowing whether anything is
exported: off (`NO_SPANS`), a span is a shared object that does nothing, and
OpenTelemetry is never imported. On, `operator_spans.py` implements it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from achilles.telemetry.settings import tracing_enabled

Attribute = str | bool | int | float | Sequence[str] | Sequence[int]


class Span(Protocol):
    def set_attribute(self, key: str, value: Attribute) -> None: ...

    @property
    def traceparent(self) -> str | None:
        """The W3C `traceparent` of this span (None when nothing is traced)."""


class Spans(Protocol):
    def span(
        self,
        name: str,
        attributes: Mapping[str, Attribute] | None = None,
        *,
        parent: Span | None = None,
    ) -> AbstractContextManager[Span]:
        """A span for the block: a child of `parent`, else the root of a trace of its
        own. An exception leaving the block is recorded on it (error status)."""

    def close(self, timeout: float) -> bool:
        """Export what is left and stop, within `timeout` seconds."""


class _NoSpan:
    def set_attribute(self, key: str, value: Attribute) -> None:
        pass

    @property
    def traceparent(self) -> str | None:
        return None


_NO_SPAN = _NoSpan()


class NoSpans:
    """Tracing off: nothing recorded, nothing exported."""

    @contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, Attribute] | None = None,
        *,
        parent: Span | None = None,
    ) -> Iterator[Span]:
        yield _NO_SPAN

    def close(self, timeout: float) -> bool:
        return True


NO_SPANS = NoSpans()


def operator_spans(environ: Mapping[str, str] = os.environ) -> Spans:
    """The operator's spans: exported when the environment configures an OTLP endpoint
    (`settings.py`), else `NO_SPANS` (and OpenTelemetry not imported)."""
    if not tracing_enabled(environ):
        return NO_SPANS
    from achilles.telemetry.operator_spans import OperatorSpans

    return OperatorSpans()
