"""FLOW Package/1: what a component image declares, and holding its runs to it.

``frontmatter`` parses ``FLOW.md`` (the strict YAML subset and the closed Metadata/1
vocabulary), ``reader`` reads a package's files out of an image without running it,
``parse`` validates them into a :class:`~runner.package.parse.Package` (compiling its
schemas and contracts), and ``checks`` holds an invocation to the package before and after
it runs.
"""

from typing import Final

from runner.package.errors import InvocationRefused, PackageError

FLOW_MD: Final = "FLOW.md"
"""The one required file of a package, at its root, in exact case."""

__all__ = ["FLOW_MD", "InvocationRefused", "PackageError"]
