#!/usr/bin/env sh
# shell-hello: Run/1 by hand. The host writes one flow/run request, a JSON object on one
# line, to stdin; answer.awk writes the one response line to stdout; exit 0 ends the run.
# stderr is free for diagnostics.
echo "shell-hello: answering the flow/run request" >&2
exec awk -f /flow/package/answer.awk
