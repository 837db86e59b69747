"""The exit statuses of every flow-runner command, in one table.

``exec`` and ``job``: 0 outcome ``done``; 3 a declared custom outcome; 124
``DEADLINE_EXCEEDED``; 130 ``CANCELLED`` by the user; 4 any other Run failure; 5 an
infrastructure failure (the engine failed or went away: retrying may succeed); 2 bad
usage or configuration (nothing was run). ``batch``: 0 every run succeeded, 4 some run
failed, 5 some run infra-failed, 130 interrupted, 2 bad usage. ``job`` adds 75, a failure
of the wrapper itself. One table, so that a status means one thing whoever exits with it.
"""

from __future__ import annotations

EXIT_DONE = 0
EXIT_USAGE = 2
EXIT_CUSTOM_OUTCOME = 3
EXIT_FAILED = 4
EXIT_INFRASTRUCTURE = 5
EXIT_WRAPPER = 75
"""The Kubernetes wrapper itself failed (EX_TEMPFAIL): retrying the pod may succeed."""
EXIT_DEADLINE = 124
EXIT_CANCELLED = 130
