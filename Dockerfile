# The runner image: flow-runner in a container, driving the engine whose socket is mounted:
#   docker run --rm --init=false -v /var/run/docker.sock:/var/run/docker.sock \
#     -v "$PWD:$PWD" -w "$PWD" flow-runner:latest exec IMAGE --attach data=./in:ro
# Every run's container is a sibling on the engine's host; attachment and scratch paths are
# translated to the host's by the runner container's own bind mounts (README: "The runner
# image"). Built by `make image` (images/build.sh) with `docker build --network none`, from
# the local base and what images/runner/inputs.sh prepared on the host: the dependency wheels
# in .build/wheels (installed with --no-index) and Debian's static tini.
# It also serves as the base of component images that need the whole runner inside.
FROM flow-runner/base:bookworm AS build
COPY .build/wheels /wheels
COPY pyproject.toml README.md /src/
COPY runner /src/runner
COPY sandbox-profiles /src/sandbox-profiles
# A venv without pip: pip runs from its wheel, so it is not in the image; .pyc files are
# written (the base keeps them: imports from a read-only root stay fast).
RUN python3 -m venv --without-pip /opt/flow-runner \
 && /opt/flow-runner/bin/python "$(echo /wheels/pip-*.whl)/pip" install --quiet --no-index \
      --find-links /wheels --no-cache-dir --disable-pip-version-check /src

FROM flow-runner/base:bookworm
COPY --from=build /opt/flow-runner /opt/flow-runner
COPY .build/tini-static /usr/bin/tini
# The frozen `flow-runner job` and a static tini (images/job-wrapper/build.sh): a Job's init
# container copies them into the pod for a component image that has neither.
COPY .build/job-wrapper /opt/flow-runner/job
COPY images/runner/entrypoint /usr/local/bin/flow-runner-entrypoint
# The unprivileged user the runner becomes (the entrypoint adds the socket's group), with a
# home of its own: its state (the container-label key, ~/.local/state/flow-runner) is kept
# there, so the image keys its own labels with nothing mounted.
RUN echo 'flow-runner:x:10001:10001:flow-runner:/home/flow-runner:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'flow-runner:x:10001:' >>/etc/group \
 && install -d -o 10001 -g 10001 -m 700 /home/flow-runner
ENV PATH=/opt/flow-runner/bin:/usr/local/bin:/usr/bin:/bin
# tini is PID 1: it forwards SIGTERM (`docker stop`) to flow-runner, which cancels its runs
# with their grace and removes their containers, and it reaps whatever exits.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/flow-runner-entrypoint"]
CMD ["--help"]
