"""A read-only attribute that reads a field of another attribute: one line where a ``@property`` took four.

Settings now live in small objects (``callback.generation.batch_size``), while the attributes 0.2 had
(``callback.batch_size``) stay readable. Each is a :class:`ReadThrough`: it reads the dotted path on
the instance, refuses assignment (the setting has one owner), and is documented by its ``doc``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

__all__ = ["ReadThrough"]

T = TypeVar("T")


class ReadThrough(Generic[T]):
    """``instance.<name>`` reads ``instance.<path>`` (a dotted path of attributes); assigning to it is an error.

    Examples:
        >>> class Settings:
        ...     size = 3
        >>> class Owner:
        ...     size: ReadThrough[int] = ReadThrough("settings.size", "The size (``settings.size``).")
        ...     def __init__(self) -> None:
        ...         self.settings = Settings()
        >>> Owner().size
        3
    """

    def __init__(self, path: str, doc: str = "") -> None:
        self.path = tuple(path.split("."))
        self.__doc__ = doc
        self.name = self.path[-1]

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> ReadThrough[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> ReadThrough[T] | T:
        if instance is None:
            return self
        value: Any = instance
        for part in self.path:
            value = getattr(value, part)
        return value

    def __set__(self, instance: object, value: Any) -> None:
        raise AttributeError(f"{type(instance).__name__}.{self.name} is read-only: set {'.'.join(self.path)}")
