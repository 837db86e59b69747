"""The warm runner: a long-lived process that the ``flow-runner`` command hands its run to.

A fresh ``flow-runner exec`` spends ~450 ms starting the interpreter and importing
docker-py, anyio, pydantic, typer and the runner before its run. A warm runner (``flow-runner
daemon start``, opt-in) has imported all of it once; the console script
(:mod:`runner.launch`) finds it, passes it the whole of its process (file descriptors,
argv, environment, working directory, umask, limits, signal dispositions) and waits for
the exit status. With no warm runner, or one that cannot make the run exactly as the
command would have made it, the command runs in its own process as before.

Three processes serve one command:

- the *server* (:mod:`runner.warm.server`) imports everything, accepts on a socket in a
  directory only its user can enter (:mod:`runner.warm.rundir`), checks each peer's uid,
  forks a *handler* per connection, reaps them, and exits when idle;
- the *handler* reads the request, refuses it when the client's process differs in
  anything it cannot adopt (:mod:`runner.warm.context`), else adopts the rest and forks
- the *run*, which becomes the client's process and calls the same ``main`` the command
  would have called. The handler reports the run's exit status and relays nothing else:
  the run writes to the client's own descriptors, and the client forwards its signals to
  the run (:mod:`runner.warm.client`).

The socket's name is a digest of the installation (:mod:`runner.warm.key`), so a changed
checkout or interpreter never reaches a server that imported the old one. Messages are
length-prefixed JSON objects, descriptors travel with them (:mod:`runner.warm.wire`).
"""
