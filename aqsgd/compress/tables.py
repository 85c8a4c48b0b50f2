"""Read-only views of the registry's tables (aqsgd.compress.registry), read when used, so
that a list derived from a table follows it as plug-ins load:

    MODES = Names(ACTIVATION_MODES)                                  # ('none', 'directq', ...)
    DEFAULT_BITS = View(COMPARISONS, lambda c: c.default_bits, lambda c: c.takes_bits)
    Live(table, fill, "activation mode", note)   # `table` after fill(); read-only, ordered

Imports the standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = ["Live", "Names", "View"]


class Live(Mapping):
    """The dict `table`, read-only, after `fill()` (which fills it on first use); a name
    it lacks is a KeyError saying so, with `note()` (e.g. plug-ins that were left out)."""

    def __init__(self, table: dict, fill: Callable[[], None], kind: str,
                 note: Callable[[], str] = lambda: ""):
        self._table, self._fill, self._kind, self._note = table, fill, kind, note

    def __getitem__(self, name: str):
        self._fill()
        try:
            return self._table[name]
        except KeyError:
            raise KeyError(f"{self._kind} {name!r} is not registered (registered: "
                           f"{', '.join(self._table)}){self._note()}") from None

    def __contains__(self, name) -> bool:
        self._fill()
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        self._fill()
        return iter(tuple(self._table))  # a snapshot: a plug-in may load meanwhile

    def __len__(self) -> int:
        self._fill()
        return len(self._table)

    def __repr__(self) -> str:
        return repr(dict(self))


class Names(Sequence):
    """The names of `table`'s entries that `keep` accepts, read when used: a tuple that
    follows the registry (`', '.join(...)`, `in`, `==` a tuple, indexing)."""

    def __init__(self, table: Mapping, keep: Callable[[object], bool] = lambda entry: True):
        self._table, self._keep = table, keep

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, entry in self._table.items() if self._keep(entry))

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other) -> bool:
        return self._names() == (tuple(other) if isinstance(other, Names) else other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self._names())


class View(Mapping):
    """`value(entry)` of `table`'s entries that `keep` accepts, read when used."""

    def __init__(self, table: Mapping, value: Callable = lambda entry: entry,
                 keep: Callable[[object], bool] = lambda entry: True):
        self._table, self._value, self._keep = table, value, keep

    def __getitem__(self, name: str):
        entry = self._table[name]
        if not self._keep(entry):
            raise KeyError(name)
        return self._value(entry)

    def __iter__(self) -> Iterator[str]:
        return iter(Names(self._table, self._keep))

    def __len__(self) -> int:
        return len(Names(self._table, self._keep))

    def __repr__(self) -> str:
        return repr(dict(self))
