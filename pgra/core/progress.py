"""Progress for long stages: a tqdm bar on a terminal, a plain line every ``PGRA_PROGRESS_INTERVAL`` s in a log."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

DEFAULT_INTERVAL = 30.0


def _interval(interval: float | None) -> float:
    if interval is not None:
        return interval
    try:
        return float(os.environ.get("PGRA_PROGRESS_INTERVAL", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _scaled(n: float) -> str:
    """``1234567`` -> ``1.2M`` (tqdm's ``unit_scale``)."""
    for prefix in ("", "k", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.0f}{prefix}" if prefix == "" else f"{n:.1f}{prefix}"
        n /= 1000
    return f"{n:.1f}P"


class LogProgress:
    """tqdm's interface printing a line at most every ``interval`` seconds, and once more on ``close``."""

    def __init__(self, iterable: Iterable[Any] | None = None, total: float | None = None, desc: str = "",
                 unit: str = "it", interval: float = DEFAULT_INTERVAL, initial: float = 0,
                 unit_scale: bool = False, file: Any = None, clock: Callable[[], float] | None = None) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.desc, self.interval = total, desc, interval
        self.unit = "" if unit.strip() == "it" else unit.strip()
        self.unit_scale = unit_scale
        self.n, self.initial = initial, initial
        self.file = file if file is not None else sys.stderr
        self.postfix = ""
        self._printed: tuple[float, str] | None = None  # (n, postfix) of the last line printed
        self.clock = clock if clock is not None else time.monotonic
        self.start = self.last = self.clock()
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("progress() made without an iterable cannot be iterated")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __len__(self) -> int:
        return int(self.total or 0)

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: float = 1) -> None:
        """Count ``n`` more units; print a line if ``interval`` seconds passed since the last one."""
        self.n += n
        now = self.clock()
        if now - self.last >= self.interval and not self.closed:
            self.last = now
            self._print(now)

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        """Show ``key=value`` pairs at the end of the next lines."""
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """Show ``s`` at the end of the next lines."""
        self.postfix = s

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        """Replace the line's leading description."""
        self.desc = desc or ""

    def refresh(self) -> None:
        """No-op (tqdm redraws here; a log only gets lines from ``update`` and ``close``)."""

    def write(self, s: str) -> None:
        """Print ``s`` on its own line (tqdm.write)."""
        print(s, file=self.file, flush=True)

    def _amount(self, n: float) -> str:
        return _scaled(n) if self.unit_scale else f"{n:g}"

    def line(self, now: float | None = None) -> str:
        """The progress line, e.g. ``training: 120/500 steps (24%), 3m10s elapsed, ~10m left, loss=0.41``."""
        now = self.clock() if now is None else now
        elapsed = now - self.start
        done = f"{self._amount(self.n)}/{self._amount(self.total)}" if self.total else self._amount(self.n)
        text = f"{self.desc}: {done}" if self.desc else done
        if self.unit:
            text += f"{'' if self.unit_scale else ' '}{self.unit}"
        if self.total:
            text += f" ({100 * self.n / self.total:.0f}%)"
        text += f", {_duration(elapsed)} elapsed"
        ran = self.n - self.initial
        if self.total and ran > 0 and self.n < self.total:
            text += f", ~{_duration(elapsed / ran * (self.total - self.n))} left"
        return text + (f", {self.postfix}" if self.postfix else "")

    def _print(self, now: float) -> None:
        self._printed = (self.n, self.postfix)
        print(self.line(now), file=self.file, flush=True)

    def close(self) -> None:
        """Print the final line (once; not again if the last ``update`` line already said the same)."""
        if not self.closed:
            self.closed = True
            if self._printed != (self.n, self.postfix):
                self._print(self.clock())


class _Silent:
    """A disabled progress object: counts, prints nothing."""

    def __init__(self, iterable: Iterable[Any] | None = None, total: float | None = None,
                 initial: float = 0) -> None:
        self.iterable, self.total, self.n = iterable, total, initial

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable if self.iterable is not None else ())

    def __enter__(self) -> _Silent:
        return self

    def update(self, n: float = 1) -> None:
        self.n += n

    def write(self, s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    __exit__ = set_postfix = set_postfix_str = set_description = refresh = close = _nothing


def progress(iterable: Iterable[Any] | None = None, *, total: float | None = None, desc: str = "",
             unit: str = "it", disable: bool = False, interval: float | None = None, initial: float = 0,
             unit_scale: bool = False) -> Any:
    """A tqdm-like progress object over ``iterable`` (or for ``update`` calls): a ``tqdm`` bar on a terminal, else
    a :class:`LogProgress` (``interval``: default ``PGRA_PROGRESS_INTERVAL`` or 30 s); ``disable`` prints nothing."""
    if disable:
        return _Silent(iterable, total, initial)
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, mininterval=1.0, initial=initial,
                    unit_scale=unit_scale)
    return LogProgress(iterable, total=total, desc=desc, unit=unit, interval=_interval(interval),
                       initial=initial, unit_scale=unit_scale)
