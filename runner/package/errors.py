"""The two ways a package stops a run: the package is broken, or the invocation misfits it."""

from __future__ import annotations


class PackageError(ValueError):
    """A package the host refuses, naming the file, the key (a dotted frontmatter path, a
    JSON pointer into a schema file, or empty) and the broken rule."""

    def __init__(self, file: str, key: str, rule: str) -> None:
        super().__init__(file, key, rule)
        self.file = file
        self.key = key
        self.rule = rule

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        return f"invalid FLOW package: {where}: {self.rule}"


class InvocationRefused(ValueError):
    """Settings, attachments, capability slots (or, from runner.api, an input too large
    for its frame) that do not fit, found before any container exists. ``code``:
    ``INVALID_SETTINGS`` (a host diagnostic), ``INVALID_ATTACHMENTS``,
    ``INVALID_CAPABILITIES`` or ``INVALID_INPUT``. A usage error: the caller can fix it.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
