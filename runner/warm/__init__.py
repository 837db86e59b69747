"""The warm runner: a long-lived process that the ``flow-runner`` command hands its run to.

A fresh ``flow-runner exec`` spends ~450 ms starting and importing before its run; a warm
runner (``flow-runner daemon start``), on a socket only its user can reach, imported
everything once. The console script (:mod:`runner.launch`) passes it the whole of its
process and waits for the exit status; with none, or one that cannot make the run exactly
as the command would, the command runs in process. The *server* (:mod:`runner.warm.server`)
forks a *handler* per connection (:mod:`runner.warm.handler`), which refuses a client it
cannot imitate (:mod:`runner.warm.context`) or forks the *run*, which becomes the client's
process. The socket is named by a digest of the installation (:mod:`runner.warm.key`).
"""
