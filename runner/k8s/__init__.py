"""flow-runner on Kubernetes: the in-pod job wrapper and the Job manifests it runs under.

Kubernetes is the engine that spreads invocations over machines; flow-runner does not
schedule across machines. ``wrapper`` is what runs inside a Job's pod (``flow-runner
job``, frozen into a self-contained program that an init container brings into the pod:
the pod is the sandbox, the component a child process), ``termination`` its exit classes
and termination message, ``manifests`` the Job / Indexed Job / ConfigMap / NetworkPolicy
rendering (``flow-runner k8s job|batch``), ``images`` what that rendering checks of a
component image, and ``logs`` the reading of the wrappers' result lines back into a batch
result store (``flow-runner batch import``).
Nothing below this package imports it.
"""
