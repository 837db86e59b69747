"""The Docker backend, in four layers: ``engine`` (every engine call, in worker threads,
its errors mapped in one place), ``attach`` (the stdio connection and its sans-I/O
demultiplexer), ``container`` (a started container: wait, kill, stop) and ``sandbox``
(:class:`~runner.sandbox.docker.sandbox.DockerSandbox`: mounts, host config, launch)."""
