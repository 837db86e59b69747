"""The Docker backend: ``engine`` (every engine call), ``attach`` (the stdio connection),
``container`` (a started container) and ``sandbox`` (mounts, host config, launch)."""
