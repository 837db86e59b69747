"""The two ways a package stops a run: the package is broken, or the invocation misfits it."""

from __future__ import annotations


class PackageError(ValueError):
    """A package the host refuses to run, naming the file, the key and the broken rule.

    ``key`` is a dotted path into the frontmatter (``outcomes.done``), a JSON pointer into
    a schema file, or empty for the file as a whole.
    """

    def __init__(self, file: str, key: str, rule: str) -> None:
        super().__init__(file, key, rule)
        self.file = file
        self.key = key
        self.rule = rule

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        return f"invalid FLOW package: {where}: {self.rule}"


class InvocationRefused(ValueError):
    """Settings, attachments or capability slots that do not fit the package.

    Raised before any container exists. ``code`` is ``INVALID_SETTINGS`` (a host
    diagnostic, not a wire code), ``INVALID_ATTACHMENTS`` or ``INVALID_CAPABILITIES``
    (or ``INVALID_INPUT`` from runner.api: an input too large for its ``flow/run`` frame);
    the CLI reports it as a usage error (exit 2): the fix is in the caller's hands.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
