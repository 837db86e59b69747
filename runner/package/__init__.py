"""FLOW Package/1: what a component image declares (``frontmatter``, ``parse``), read
without running it (``reader``), and holding its runs to it (``checks``).
"""

from typing import Final

from runner.package.errors import InvocationRefused, PackageError

FLOW_MD: Final = "FLOW.md"
"""The one required file of a package, at its root, in exact case."""

__all__ = ["FLOW_MD", "InvocationRefused", "PackageError"]
