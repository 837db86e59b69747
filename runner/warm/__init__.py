"""The warm runner: a long-lived process that the ``flow-runner`` command hands its run to.

A fresh ``flow-runner exec`` spends ~450 ms starting the interpreter and importing before
its run; a warm runner (``flow-runner daemon start``) has imported everything once. The
console script (:mod:`runner.launch`) finds it, passes it the whole of its process (file
descriptors, argv, environment, working directory, umask, limits, signal dispositions)
and waits for the exit status; with none, or one that cannot make the run exactly as the
command would have, the command runs in its own process.

Three processes serve one command: the *server* (:mod:`runner.warm.server`: imports
everything, accepts on a socket only its user can reach, forks a handler per connection,
exits when idle); the *handler* (:mod:`runner.warm.handler`: refuses a client whose
process differs in anything it cannot adopt, :mod:`runner.warm.context`, else forks); and
the *run*, which becomes the client's process and calls the command's ``main``. The socket's
name is a digest of the installation (:mod:`runner.warm.key`): a changed checkout never
reaches a server that imported the old one.
"""
